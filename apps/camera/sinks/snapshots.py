"""``--snapshots DIR`` (or ``--output snapshots://DIR``): each track's best picture, written when the
track ends — the frame in which the detector was surest of it (highest score; frames the tracker
only predicted never count), drawn as the overlay draws it (its box; a skeleton, a mask or
an oriented box where the task has one) — as Frigate keeps a snapshot per object. The
``track_end`` event (events file, MQTT) carries the file's path as ``snapshot``. Query options:
``crop=1`` also writes the box's crop (``..._crop.jpg``, ``snapshot_crop``), ``clean=1`` writes
the frame without the box, ``keep_days=D`` (``--keep-days``) deletes the folder's pictures older
than D days (checked at most once a minute; the newest stays). Turns tracking on.

Memory stays bounded by the live tracks: each keeps one JPEG of its best frame so far (encoded
when a better one comes), dropped when its file is written. Files are written atomically (a
crash leaves no half-written picture) under names that carry the run's start, the stream, the
track ID and the run's ID (``20261203-083847_s0_track1_1f2e3d4c.jpg``), created exclusively: two
runs sharing a folder never overwrite each other, and an event never names another's picture.
Retention removes only the pictures edgert recorded as its own (:mod:`.retention`).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

from edgert.runtime.errors import OutputError
from edgert.runtime.events import kind_of

from .base import Sink, SinkContext, folder_and_query, make_folder, sizes_of, streams_of, written
from .retention import Ledger


def _folder_and_options(uri: str) -> tuple[str, dict]:
    folder, opts = folder_and_query(uri, "snapshots", ("crop", "clean", "keep_days", "streams"))
    yes = lambda k: opts.get(k, "0") in ("1", "true", "yes")  # noqa: E731
    keep = None
    if "keep_days" in opts:
        try:
            keep = float(opts["keep_days"])
        except ValueError:
            keep = -1.0
        if not 0 < keep < float("inf"):
            raise OutputError("snapshots: keep_days is a number of days above 0")
    streams = streams_of(opts, "snapshots")  # None: every stream's
    return folder, {
        "crop": yes("crop"),
        "clean": yes("clean"),
        "keep_days": keep,
        "streams": streams,
    }


class SnapshotsOutput(Sink):
    takes_frames = True
    draws = False  # the clean frame: the box is drawn here, on the best one only
    takes_events = True
    enriches_events = True  # runs before the sinks that write events: they carry the path

    RETAIN_EVERY_S = 60.0

    def __init__(
        self,
        folder: str,
        crop: bool = False,
        clean: bool = False,
        keep_days: float | None = None,
        streams: frozenset | None = None,
    ) -> None:
        self.streams = streams  # the streams whose tracks get a picture (None: every)
        self.folder = make_folder(folder, "snapshots")
        self.ledger = Ledger(self.folder, "snapshots")
        self.crop, self.clean = crop, clean
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.best: dict = {}  # (stream, track id) -> (score, label, jpeg, crop jpeg)
        self.written = 0
        self.paths: list = []  # this run's pictures (and crops)
        self.keep_days, self._retained, self.deleted = keep_days, float("-inf"), 0

    def wants(self, frame) -> bool:
        return self.streams is None or frame.stream in self.streams

    def write(self, frame, image, record: dict) -> None:
        if not frame.inferred or frame.results is None:
            return  # a predicted box is not a picture of the object
        for o in frame.results.objects:
            if o.track_id is None or not all(math.isfinite(v) for v in (*o.box, o.score)):
                continue  # a broken model's NaN is no picture (and no int pixel)
            key = (frame.stream, o.track_id)
            score = float(o.score)
            if key in self.best and self.best[key][0] >= score:
                continue
            self.best[key] = (score, o.label, *self._pictures(image, o, frame.results.task))

    def _pictures(self, image, o, task: str) -> tuple:
        """The JPEGs of the frame with this object drawn as the overlay draws it (its box and
        label; a skeleton, mask or oriented box where its task has one), in green; its crop."""
        import cv2

        from edgert.runtime.results import Result
        from edgert.runtime.tasks import spec_of

        h, w = image.shape[:2]
        x1, y1, x2, y2 = (int(round(v)) for v in o.box)
        x1, y1 = max(0, min(w - 1, x1)), max(0, min(h - 1, y1))
        x2, y2 = max(x1 + 1, min(w, x2)), max(y1 + 1, min(h, y2))
        crop = cv2.imencode(".jpg", image[y1:y2, x1:x2])[1].tobytes() if self.crop else None
        picture = image
        if not self.clean:
            picture = image.copy()
            alone = Result.of_objects([replace(o, track_id=None)], task)  # untracked: green
            spec = spec_of(alone)
            if spec is not None and spec.draw is not None:
                spec.draw(picture, alone)
            else:
                cv2.rectangle(picture, (x1, y1), (x2 - 1, y2 - 1), (0, 220, 0), 2)
        return cv2.imencode(".jpg", picture)[1].tobytes(), crop

    def events(self, events: list) -> None:
        for e in events:
            if kind_of(e) != "track_end":
                continue
            got = self.best.pop((e.get("stream", 0), e.get("track_id")), None)
            if got is None:
                continue
            _, label, jpeg, crop = got
            stem = f"{self.stamp}_s{e.get('stream', 0)}_track{e['track_id']}"
            # a full disk: OutputError, the run's policy
            path = self.ledger.write_new(stem, ".jpg", jpeg)
            e["snapshot"] = str(path)
            self.paths.append(path)
            if crop is not None:
                cropped = self.ledger.write_new(f"{path.stem}_crop", ".jpg", crop, tag=False)
                e["snapshot_crop"] = str(cropped)
                self.paths.append(cropped)
            self.written += 1
            self._retain()

    def _retain(self) -> None:
        if self.keep_days is None or time.monotonic() - self._retained < self.RETAIN_EVERY_S:
            return
        self._retained = time.monotonic()
        self.deleted += len(self.ledger.retain(keep_days=self.keep_days))

    def close(self) -> None:
        self.ledger.close()

    def report(self):
        out = {"snapshots": str(self.folder), "written": self.written}
        if self.keep_days is not None:
            out["deleted"] = self.deleted
        return out

    def wrote(self) -> list:
        """The folder, this run's pictures in it and their bytes (those retention deleted are
        counted in ``deleted``, not here)."""
        kept = sizes_of(self.paths)
        crops = sum(1 for p in kept if p.stem.endswith("_crop"))
        return [
            written(
                "snapshots",
                self.folder,
                files=len(kept) - crops,
                crops=crops,
                bytes=sum(kept.values()),
                deleted=self.deleted,
            )
        ]


def open_uri(uri: str, ctx: SinkContext) -> SnapshotsOutput:
    folder, opts = _folder_and_options(uri)
    return SnapshotsOutput(folder, **opts)


def check(uri: str, _options=None) -> None:
    _folder_and_options(uri)


def paths(uri: str, streams: int, mosaic: bool) -> list[tuple[str, Path]]:
    return [(f"--output {uri}", Path(_folder_and_options(uri)[0]))]
