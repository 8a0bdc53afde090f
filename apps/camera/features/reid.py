"""Re-identification across cameras: a track's embedding (an embedder secondary's, see
:mod:`.secondary_models`) compared with the embeddings of the tracks other streams saw within
the last ``window_s`` seconds; the most similar one at or above ``threshold`` (cosine) is the
same object seen again, and the link is a ``track_reid`` event (the store keeps it as a field
of both tracks; ``GET /api/counts`` counts linked tracks once).

Each track links once, to at most one track of each other stream, and a track of the other
stream is taken by one track of a stream at most (the first, most similar, one): two people
seen by camera B cannot both be camera A's one. The threshold and the window are measured on
real footage (``benchmarks/reid.py``)."""

from __future__ import annotations

import numpy as np

KEEP = 4096  # tracks remembered at most (then the least recently seen go)


class Reid:
    def __init__(self, threshold: float, window_s: float) -> None:
        self.threshold, self.window_s = threshold, window_s
        self.vectors: dict = {}  # (stream, track_id) -> unit vector (its latest)
        self.seen_at: dict = {}  # (stream, track_id) -> when it was last seen (monotonic s)
        self.linked: dict = {}  # (stream, track_id) -> {other stream: (its track, similarity)}
        self.taken: set = set()  # ((stream, track_id), other stream): taken by a track of it
        self.links = 0

    def seen(self, key, now: float) -> None:
        """A track was on a frame at ``now`` (only those with a vector are remembered)."""
        if key in self.vectors:
            self.seen_at[key] = now

    def offer(self, key, unit: np.ndarray, now: float) -> list:
        """A track's (new) vector; the links it makes: [(other key, similarity)]."""
        self.vectors[key] = np.asarray(unit, np.float32)
        self.seen_at[key] = now
        if len(self.vectors) > KEEP:
            self._forget()
        done = self.linked.setdefault(key, {})
        best: dict = {}  # other stream -> (similarity, other key)
        for other, v in self.vectors.items():
            if other[0] == key[0] or other[0] in done or (other, key[0]) in self.taken:
                continue
            if now - self.seen_at.get(other, -1e18) > self.window_s or v.shape != unit.shape:
                continue
            sim = float(np.dot(v, unit))
            if sim >= self.threshold and sim > best.get(other[0], (-2.0,))[0]:
                best[other[0]] = (sim, other)
        out = []
        for stream, (sim, other) in sorted(best.items()):
            done[stream] = (other, sim)
            self.linked.setdefault(other, {})[key[0]] = (key, sim)
            self.taken.add((other, key[0]))
            self.taken.add((key, stream))
            out.append((other, sim))
        self.links += len(out)
        return out

    def _forget(self) -> None:
        for key in sorted(self.seen_at, key=self.seen_at.get)[: len(self.vectors) - KEEP]:
            self.vectors.pop(key, None)
            self.seen_at.pop(key, None)
            self.linked.pop(key, None)
