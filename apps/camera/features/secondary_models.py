"""Second-stage models on tracked objects (``--secondary BUNDLE[:OPTIONS]``): a classifier (which
kind, wearing what), a detector (a face in a person, a plate in a car) or any task model, run on
crops of the primary's tracks, under a budget of attempts per track, on the best views.

    output thread, per inferred frame:  each confirmed track matched on it (of the labels the
        secondary runs on) ─▶ its crop's quality ─▶ held while it is the track's best since the
        last attempt ─▶ an attempt when its choosing window closes, a re-check fires, or the
        track ends (a fast object gets its attempt before it goes)
    the attempts of one primary batch (every stream's) ─▶ one queue item ─▶ the secondary's
        worker thread: one call of each secondary model on that batch's crops ─▶ each track's
        consensus (votes weighted by crop quality) ─▶ the objects' extras, events

The worker never holds the primary pipeline: its queue holds at most ``QUEUE_CROPS`` crops, and a
crop that does not fit drops the lowest-quality crop waiting (counted; that attempt is given back
to its track). A frame the gate skipped gives no crop (its boxes are predictions).

**Crop quality** (0..1) is the product of: size (the crop's shorter side over the secondary's
input side, at most 1), sharpness (variance of the Laplacian of the crop at 64 px, v / (v + 100)),
the detector's score, whole-ness (0.5 when the box touches the frame's edge: part of the object
is outside) and stillness (1 / (1 + speed in box heights a second)). A box whose shorter side is
under ``min`` pixels is refused (counted). The margin (a share of each side) is added around the
box and the crop is then clipped to the frame: a box at the edge is not padded, its crop is cut
there.

**Consensus**: every attempt votes for its labels with weight quality x probability (a
classifier's top-k; a detector's objects by score, "none" when it found nothing); the track's
label is the heaviest and its confidence the weight of that label over the weight of all
attempts. A detector secondary also keeps the objects of its best attempt (boxes in source
pixels, of the frame they were found on).
"""

from __future__ import annotations

import logging
import math
import threading

import numpy as np

from edgert.runtime.errors import EdgertError, OutputError

from .secondary_crops import Crop, TrackState, crop_box, cut, input_side, needs, quality
from .secondary_spec import NAME, RESERVED, SecondarySpec
from .secondary_stage import QUEUE_CROPS, SecondaryStage

log = logging.getLogger(__name__)
__all__ = [
    "NAME",
    "QUEUE_CROPS",
    "RESERVED",
    "Crop",
    "Secondary",
    "SecondarySpec",
    "SecondaryStage",
    "TrackState",
    "crop_box",
    "load_all",
    "quality",
]

GOOD = 0.8  # a crop this good is tried at once (no need to wait for a better view)
HELD_BYTES = 64 << 20  # the tracks' held crops of one secondary, at most (then none is held)


class Secondary:
    """One secondary model and its tracks' states (the output thread chooses and reads, the
    worker answers; one lock)."""

    def __init__(self, spec: SecondarySpec, model, name: str) -> None:
        self.spec, self.name = spec, name
        self.use(model)
        self.tracks: dict = {}
        self.lock = threading.Lock()
        self.calling = threading.Lock()  # the model's calls: the worker's, a search's picture
        self.text_lock = threading.Lock()
        self.text = None  # (the model, its bundle's text tower), loaded when a text is asked
        self.calls = 0
        self.crops = 0
        self.batches = 0  # queue items (a primary batch's crops) it ran
        self.refused_size = 0
        self.not_finite = 0  # boxes not finite (not cut) and answers not finite (not votes)
        self.refused_memory = 0  # crops not held: the crops held would pass HELD_BYTES
        self.held_bytes = 0  # of the tracks' held crops (the output thread's)
        self.dropped = 0
        self.tracks_attempted = 0
        self.ended_attempts = 0  # attempts of the tracks ended (their states gone)
        self.ended_tracks = 0
        self.most = 0
        self.swaps = 0  # models swapped in (POST /model naming it)
        self.failed: str | None = None  # why it runs no more (its model failed)

    def use(self, model) -> None:
        """``model`` is what runs from now on (what the crops are sized and read by)."""
        from edgert.runtime.tasks import task_spec

        kind = task_spec(model.task)
        self.model = model
        self.classifies, self.boxes = bool(kind.class_scores), bool(kind.boxes)
        self.embeds = bool(kind.vectors)  # an embedder: one vector per track, no label
        self.input_side = input_side(model)
        self.need = needs(model)  # what a crop is scaled down to (twice that)

    def extras(self, key) -> dict | None:
        """What a track's objects carry for this secondary (None before its first answer)."""
        with self.lock:
            st = self.tracks.get(key)
            c = st.consensus() if st is not None else None
            if c is None:
                return None
            out = {"label": c[0], "confidence": round(c[1], 4), "attempts": st.answered}
            if self.boxes:
                out["objects"] = list(st.objects)
            return out

    def consider(self, frame, track, picture, now: float) -> Crop | None:
        """The output thread, for a track matched on this inferred frame: hold its crop if it is
        the best in the window; returns the crop to attempt now, if any."""
        spec = self.spec
        if self.failed or (spec.on and track.label not in spec.on):
            return None
        if spec.streams and frame.stream not in spec.streams:  # not this camera's stage
            return None
        key = (frame.stream, track.track_id)
        with self.lock:
            st = self.tracks.setdefault(key, TrackState(track.label))
        if st.attempts >= spec.attempts:
            return None
        box = track.observed or track.box
        if not np.isfinite(box).all() or not np.isfinite(track.score):
            with self.lock:  # a decoder passed a NaN / inf on: nothing to cut (counted)
                self.not_finite += 1
            return None
        x1, y1, x2, y2 = box
        if min(x2 - x1, y2 - y1) < spec.min_size:
            with self.lock:
                self.refused_size += 1
            return None
        area = (x2 - x1) * (y2 - y1)
        t = frame.t_scene
        if st.opened is None:
            grew = st.attempts > 0 and area >= st.last_area * (1 + spec.grow)
            due = st.attempts > 0 and spec.every_s > 0 and t - st.last_t >= spec.every_s
            if st.attempts > 0 and not (grew or due):
                return None
            st.opened = t
        q = quality(picture, box, track.score, track.velocity, self.input_side)
        if st.held is None or q > st.held.quality:
            self._hold(st, picture, box, Crop(key, None, (0, 0), q, t, frame.index, area))
        if st.held is None:  # nothing held (the bound on bytes): the window stays open
            return None
        if st.held.quality >= GOOD or t - st.opened >= spec.window_s:
            return self._take(st)
        return None

    def _hold(self, st: TrackState, picture, box, crop: Crop) -> None:
        """``crop`` cut (scaled to what the secondary needs) and held as the track's best, unless
        the crops held would pass ``HELD_BYTES`` (counted; the one held before stays)."""
        cx1, cy1, cx2, cy2 = crop_box(box, self.spec.margin, picture.shape[:2])
        if cx2 <= cx1 or cy2 <= cy1:  # the box is outside the frame: nothing to cut
            return
        crop.image, crop.scale = cut(picture, (cx1, cy1, cx2, cy2), self.need)
        crop.origin = (cx1, cy1)
        before = st.held.image.nbytes if st.held is not None else 0
        if self.held_bytes - before + crop.image.nbytes > HELD_BYTES:
            with self.lock:
                self.refused_memory += 1
            return
        self.held_bytes += crop.image.nbytes - before
        st.held = crop

    def ending(self, key) -> Crop | None:
        """A track ended: its held crop, attempted now (the object is leaving)."""
        st = self.tracks.get(key)
        if st is None:
            return None
        if st.held is not None and st.attempts < self.spec.attempts and not self.failed:
            return self._take(st)
        return None

    def forget(self, key) -> None:
        """A track ended: its state goes once nothing of it waits for the worker and its last
        consensus was said (its count of attempts is kept)."""
        with self.lock:
            st = self.tracks.get(key)
            if st is not None:
                st.ended = True
                if st.held is not None:  # not attempted (its budget was spent): let go
                    self.held_bytes -= st.held.image.nbytes
                    st.held = None
                self._drop_ended(key, st)

    def _drop_ended(self, key, st: TrackState) -> None:
        if st.ended and st.pending == 0 and self._current(st) == st.said:
            del self.tracks[key]
            if st.counted:
                self.ended_tracks += 1
                self.ended_attempts += st.attempts

    def _take(self, st: TrackState) -> Crop:
        crop, st.held, st.opened = st.held, None, None
        self.held_bytes -= crop.image.nbytes
        with self.lock:
            st.attempts += 1
            st.pending += 1
            self.most = max(self.most, st.attempts)
            if not st.counted:
                st.counted = True
                self.tracks_attempted += 1
        st.last_t, st.last_area = crop.t, crop.area
        return crop

    def given_back(self, crop: Crop) -> None:
        """A crop dropped from the queue: the attempt is the track's again."""
        with self.lock:
            self.dropped += 1
            st = self.tracks.get(crop.key)
            if st is not None:
                st.attempts = max(0, st.attempts - 1)
                st.pending -= 1

    def run(self, crops: list) -> None:
        """The worker: the crops in as few calls as the model's batch allows; votes counted."""
        m = self.model
        prepared = [m.preprocess(c.image) for c in crops]
        step = m.max_batch or len(crops)
        results = []
        for i in range(0, len(crops), step):
            part = prepared[i : i + step]
            with self.calling:  # one call at a time (an uploaded picture's, POST /api/search)
                out = m.infer(m.collate([t for t, _ in part]))
            results += m.postprocess(out, [tr for _, tr in part])
            with self.lock:
                self.calls += 1
        with self.lock:
            self.crops += len(crops)
            self.batches += 1
            for crop, result in zip(crops, results):
                self._vote(crop, result)

    def unanswered(self, crops: list) -> None:
        """Crops the model could not answer (it failed): no longer waited for."""
        with self.lock:
            for crop in crops:
                st = self.tracks.get(crop.key)
                if st is not None:
                    st.pending -= 1

    def _vote(self, crop: Crop, result) -> None:
        st = self.tracks.get(crop.key)
        if st is None:
            return
        st.pending -= 1
        st.answered += 1
        if self.embeds:
            e = getattr(result, "embedding", None)
            if e is None or not np.isfinite(e.vector).all():
                self.not_finite += 1
                return
            st.vectors.append((max(crop.quality, 1e-6), np.asarray(e.vector, np.float32)))
            return
        given = result.classes if self.classifies else result.objects
        if self.classifies:
            classes = [c for c in given if math.isfinite(c.score)]
        else:
            classes = [d for d in given if np.isfinite((d.score, *d.box)).all()]
        if len(classes) < len(given) or (self.classifies and not given):
            # a NaN answer is not a label (its finite rest still votes); a classifier that
            # answers no class is one whose row the decoder dropped as not finite
            self.not_finite += 1
            if not classes:
                return
        q = max(crop.quality, 1e-6)
        st.weight += q
        if self.classifies:
            for c in classes:
                st.votes[c.label] += q * float(c.score)
            return
        objects = sorted(classes, key=lambda d: -d.score)
        if not objects:
            st.votes["none"] += q
            return
        st.votes[objects[0].label] += q * float(objects[0].score)
        if q * objects[0].score > st.best:
            (ox, oy), (sx, sy) = crop.origin, crop.scale
            sxy, oxy = (sx, sy, sx, sy), (ox, oy, ox, oy)  # back to the frame's pixels
            st.best = q * objects[0].score
            st.objects = [
                {
                    "label": d.label,
                    "score": round(float(d.score), 4),
                    "box": [round(float(v), 1) for v in np.add(np.divide(d.box, sxy), oxy)],
                    "frame": crop.frame,
                }
                for d in objects
            ]

    def _current(self, st: TrackState) -> str:
        """What was last said of the track: its label, or (an embedder) its vectors' count."""
        if self.embeds:
            return str(len(st.vectors)) if st.vectors else ""
        return (st.consensus() or ("",))[0]

    def announce(self, key) -> dict | None:
        """The track's consensus when it changed since it was last said (an event's fields)."""
        if self.embeds:
            return self._announce_vector(key)
        with self.lock:
            st = self.tracks.get(key)
            c = st.consensus() if st is not None else None
            if c is None or c[0] == st.said:
                if st is not None:
                    self._drop_ended(key, st)
                return None
            st.said = c[0]
            self._drop_ended(key, st)
            return {
                "secondary": self.name,
                "label": c[0],
                "confidence": round(c[1], 4),
                "attempts": st.answered,
                "primary": st.label,
            }

    def _announce_vector(self, key) -> dict | None:
        """An embedder's track: its vector when a crop was added since it was last said (the
        fields of a ``track_embedding``; ``unit``: the float32 vector, for re-identification)."""
        import base64

        from edgert.runtime import embeddings

        with self.lock:
            st = self.tracks.get(key)
            if st is None or not st.vectors or self._current(st) == st.said:
                if st is not None:
                    self._drop_ended(key, st)
                return None
            st.said = self._current(st)
            vectors = list(st.vectors)
            self._drop_ended(key, st)
        if self.spec.embed == "best":
            unit = max(vectors, key=lambda qv: qv[0])[1]
        else:  # the quality-weighted mean of the unit vectors, made unit again
            unit = embeddings.normalise(sum(q * v for q, v in vectors)[None])[0][0]
        blob = embeddings.encode(unit, self.spec.form)
        return {
            "secondary": self.name,
            "dim": int(unit.size),
            "form": self.spec.form,
            "how": self.spec.embed,
            "crops": len(vectors),
            "primary": st.label,
            "vector": base64.b64encode(blob).decode("ascii"),
            "unit": unit,
        }

    def embed_image(self, image) -> np.ndarray:
        """The unit vector of one picture (POST /api/search), called beside the worker."""
        m = self.model
        tensor, transform = m.preprocess(image)
        with self.calling:
            out = m.infer(m.collate([tensor]))
        (result,) = m.postprocess(out, [transform])
        return np.asarray(result.embedding.vector, np.float32)

    @property
    def has_text(self) -> bool:
        """Whether the model running now came with a text tower (its bundle's manifest)."""
        from edgert.runtime.text_tower import has_text

        engine = getattr(self.model, "engine", None)
        return has_text(getattr(engine, "manifest", None) or getattr(self.model, "manifest", None))

    def embed_text(self, text: str) -> np.ndarray:
        """The unit vector of ``text`` by the text tower of the bundle running now (GET
        /api/search?text=): loaded on the first text asked, again after a swap; TextError in
        one sentence (no tower, a bad text, no tokenizers library)."""
        from edgert.runtime.text_tower import NoTextTower, TextTower, check_text

        text = check_text(text)  # a bad text loads nothing
        model, bundle = self.model, self.spec.bundle
        if not self.has_text:
            raise NoTextTower(f"the embedder {self.name} ({bundle}) carries no text tower")
        with self.text_lock:
            if self.text is None or self.text[0] is not model:
                self.text = (model, TextTower(bundle))
            tower = self.text[1]
        return tower.encode(text)

    def reset(self) -> None:
        """A new model: every live track's votes start again (its labels came from the model
        replaced) and so does its budget, less the crops still waiting (the new model answers
        them)."""
        with self.lock:
            for st in self.tracks.values():
                st.attempts, st.answered = st.pending, 0
                st.votes.clear()
                st.weight, st.objects, st.best, st.said = 0.0, [], -1.0, ""
                st.vectors = []

    def counters(self) -> dict:
        with self.lock:
            live = [st.attempts for st in self.tracks.values() if st.counted]
            tracks, attempts = self.ended_tracks + len(live), self.ended_attempts + sum(live)
            return {
                "calls": self.calls,
                "crops": self.crops,
                "batches": self.batches,
                "refused_size": self.refused_size,
                "not_finite": self.not_finite,
                "refused_memory": self.refused_memory,
                "dropped": self.dropped,
                "tracks_attempted": self.tracks_attempted,
                "attempts_per_track": round(attempts / tracks, 3) if tracks else 0.0,
                "most_attempts": self.most,
            }


def load_all(specs, load, say) -> list:
    """Each secondary loaded (``load(path)`` -> task model); one that fails to load is one
    sentence and the run goes on without it."""
    out = []
    for spec in specs:
        try:
            model = load(spec.bundle)
        except EdgertError as exc:
            _not_loaded(spec, str(exc), say)
            continue
        if not _takes(model):
            _not_loaded(
                spec,
                f"a {model.task} model: a secondary is a classifier, finds boxes or embeds",
                say,
            )
            model.close()
            continue
        name = spec.name or secondary_name(spec.bundle)
        taken = {s.name for s in out}
        if name in taken:
            if spec.name:
                for s in out:
                    s.model.close()
                model.close()
                raise OutputError(
                    f"--secondary {spec.bundle}: name={name} is taken; give each its own"
                )
            name = next(f"{name}{i}" for i in range(2, 100) if f"{name}{i}" not in taken)
        out.append(Secondary(spec, model, name))
    return out


def _takes(model) -> bool:
    from edgert.runtime.tasks import task_spec

    kind = task_spec(model.task)
    return bool(kind.class_scores or kind.boxes or kind.vectors)


def _not_loaded(spec, why: str, say) -> None:
    warn(f"--secondary {spec.bundle}: not loaded ({why}); the camera runs without it", say)


def warn(sentence: str, say) -> None:
    """A warning at start, on the terminal and in the log (a path's CR/LF escaped)."""
    from edgert.apps.uris import escape_controls

    line = escape_controls(sentence)
    say(line)
    log.warning("%s", line)


def secondary_name(bundle: str) -> str:
    """The name a second stage of ``bundle`` has without ``name=``: its file's (the store keeps
    an embedder's vectors under it; ``edgert events query --text --bundle`` reads it the same)."""
    from pathlib import Path

    name = Path(bundle).name.split(".")[0]
    return name if NAME.fullmatch(name) and name not in RESERVED else "secondary"
