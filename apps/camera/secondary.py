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

import collections
import logging
import math
import re
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from edgert.runtime.errors import EdgertError, OutputError

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# an object's own record fields and the extras tasks write: a secondary's name is none of them
RESERVED = {"box", "score", "class_id", "label", "track_id", "predicted", "age_s", "keypoints",
            "mask_area", "outline", "rbox", "angle", "corners", "classes"}  # fmt: skip
QUEUE_CROPS = 64  # crops waiting for the worker at most (then the lowest quality is dropped)
SHARP_K = 100.0  # Laplacian variance at which sharpness scores 0.5
GOOD = 0.8  # a crop this good is tried at once (no need to wait for a better view)


@dataclass(frozen=True)
class SecondarySpec:
    """One ``--secondary BUNDLE[:key=value,...]`` (see the option's help)."""

    bundle: str
    name: str = ""  # as results and metrics name it (default: the bundle's name)
    on: tuple = ()  # the primary labels it runs on (empty: every)
    margin: float = 0.1  # share of each side added around the box
    attempts: int = 3  # most attempts per track
    grow: float = 0.2  # re-check when the box's area grew by this share since the last attempt
    every_s: float = 1.0  # re-check after this long (0: never): the budget spread over a track
    min_size: int = 16  # a box's shorter side under this (pixels) is refused
    window_s: float = 0.5  # the best crop is chosen over this long before an attempt

    KEYS = {
        "name": ("name", str),
        "on": ("on", lambda v: tuple(x for x in v.split("+") if x)),
        "margin": ("margin", float),
        "attempts": ("attempts", int),
        "grow": ("grow", float),
        "every": ("every_s", float),
        "min": ("min_size", int),
        "window": ("window_s", float),
    }

    @classmethod
    def parse(cls, text: str) -> SecondarySpec:
        """``BUNDLE`` or ``BUNDLE:key=value,...``; OutputError with one sentence otherwise."""
        head, colon, tail = text.rpartition(":")
        path, opts = (head, tail) if colon and "=" in tail else (text, "")
        if not path:
            raise OutputError(f"--secondary {text}: give a bundle, then :key=value options")
        values: dict = {}
        for part in filter(None, opts.split(",")):
            key, eq, value = part.partition("=")
            if key not in cls.KEYS or not eq:
                raise OutputError(
                    f"--secondary {text}: unknown option {part!r} (options: "
                    f"{', '.join(k + '=' for k in cls.KEYS)})"
                )
            attr, kind = cls.KEYS[key]
            try:
                values[attr] = kind(value)
            except ValueError:
                raise OutputError(f"--secondary {text}: {key}={value} is not a number") from None
            if isinstance(values[attr], float) and not math.isfinite(values[attr]):
                raise OutputError(f"--secondary {text}: {key}={value} is not a finite number")
        spec = cls(path, **values)
        for bad, why in (
            (spec.attempts < 1, "attempts must be at least 1"),
            (not 0 <= spec.margin <= 1, "margin is a share of the box's side, 0 to 1"),
            (spec.grow <= 0, "grow is a share of the area, above 0"),
            (spec.every_s < 0 or spec.window_s < 0, "times are seconds, 0 or more"),
            (spec.min_size < 1, "min is pixels, at least 1"),
            (
                spec.name and (not NAME.fullmatch(spec.name) or spec.name in RESERVED),
                f"name={spec.name}: a name is a letter then letters, digits, '_' or '-', and not "
                "one of an object's own fields",
            ),
        ):
            if bad:
                raise OutputError(f"--secondary {text}: {why}")
        return spec


def quality(picture: np.ndarray, box, score: float, velocity, input_side: int) -> float:
    """The crop quality of ``box`` on ``picture`` (see the module's text)."""
    import cv2

    h, w = picture.shape[:2]
    x1, y1, x2, y2 = (float(v) for v in box)
    bw, bh = x2 - x1, y2 - y1
    size = min(1.0, min(bw, bh) / max(1, input_side))
    patch = picture[max(0, int(y1)) : max(0, int(y2)), max(0, int(x1)) : max(0, int(x2))]
    sharp = 0.0
    if patch.size:
        grey = patch if patch.ndim == 2 else cv2.cvtColor(patch, cv2.COLOR_BGR2GRAY)
        grey = cv2.resize(grey, (64, 64), interpolation=cv2.INTER_AREA)
        v = float(cv2.Laplacian(grey, cv2.CV_32F).var())
        sharp = v / (v + SHARP_K)
    whole = 0.5 if (x1 <= 1 or y1 <= 1 or x2 >= w - 1 or y2 >= h - 1) else 1.0
    still = 1.0 / (1.0 + float(np.hypot(*velocity)) / max(bh, 1.0))
    return float(size * sharp * max(0.0, min(1.0, score)) * whole * still)


def crop_box(box, margin: float, hw) -> tuple[int, int, int, int]:
    """``box`` grown by ``margin`` of each side, clipped to the frame (integers)."""
    h, w = hw
    x1, y1, x2, y2 = (float(v) for v in box)
    mx, my = (x2 - x1) * margin, (y2 - y1) * margin
    return (
        max(0, int(np.floor(x1 - mx))),
        max(0, int(np.floor(y1 - my))),
        min(w, int(np.ceil(x2 + mx))),
        min(h, int(np.ceil(y2 + my))),
    )


@dataclass(eq=False)  # compared by identity: its image is an array
class Crop:
    """One attempt's crop: whose it is, where it was cut, how good it is."""

    key: tuple  # (stream, track_id)
    image: np.ndarray
    origin: tuple  # (x, y) of the crop in the frame's pixels
    quality: float
    t: float
    frame: int
    area: float


@dataclass
class TrackState:
    """One track's attempts and consensus for one secondary."""

    label: str = ""  # the primary's label
    attempts: int = 0  # given to the worker (a dropped crop is given back)
    answered: int = 0
    pending: int = 0  # given, not yet answered
    held: Crop | None = None  # the best crop since the window opened
    opened: float | None = None  # when the choosing window opened (None: closed)
    last_t: float = -1e18  # the last attempt's time
    last_area: float = 0.0
    votes: collections.Counter = field(default_factory=collections.Counter)
    weight: float = 0.0
    objects: list = field(default_factory=list)  # a detector secondary's best attempt's
    best: float = -1.0  # that attempt's quality x score
    said: str = ""  # the consensus last announced (an event when it changes)
    ended: bool = False  # the track ended (its state goes once its answers are in and said)
    counted: bool = False  # among the tracks attempted (counted once)

    def consensus(self) -> tuple[str, float] | None:
        if not self.votes or self.weight <= 0:
            return None
        label, w = self.votes.most_common(1)[0]
        return label, w / self.weight


class Secondary:
    """One secondary model and its tracks' states (the output thread chooses and reads, the
    worker answers; one lock)."""

    def __init__(self, spec: SecondarySpec, model, name: str) -> None:
        self.spec, self.name = spec, name
        self.use(model)
        self.tracks: dict = {}
        self.lock = threading.Lock()
        self.calls = 0
        self.crops = 0
        self.batches = 0  # queue items (a primary batch's crops) it ran
        self.refused_size = 0
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
        self.input_side = _input_side(model)

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
        key = (frame.stream, track.track_id)
        with self.lock:
            st = self.tracks.setdefault(key, TrackState(track.label))
        if st.attempts >= spec.attempts:
            return None
        box = track.observed or track.box
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
            cx1, cy1, cx2, cy2 = crop_box(box, spec.margin, picture.shape[:2])
            image = picture[cy1:cy2, cx1:cx2].copy()
            st.held = Crop(key, image, (cx1, cy1), q, t, frame.index, area)
        if st.held.quality >= GOOD or t - st.opened >= spec.window_s:
            return self._take(st)
        return None

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
                self._drop_ended(key, st)

    def _drop_ended(self, key, st: TrackState) -> None:
        if st.ended and st.pending == 0 and (st.consensus() or ("",))[0] == st.said:
            del self.tracks[key]
            if st.counted:
                self.ended_tracks += 1
                self.ended_attempts += st.attempts

    def _take(self, st: TrackState) -> Crop:
        crop, st.held, st.opened = st.held, None, None
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
        q = max(crop.quality, 1e-6)
        st.weight += q
        if self.classifies:
            for c in result.classes:
                st.votes[c.label] += q * float(c.score)
            return
        objects = sorted(result.objects, key=lambda d: -d.score)
        if not objects:
            st.votes["none"] += q
            return
        st.votes[objects[0].label] += q * float(objects[0].score)
        if q * objects[0].score > st.best:
            ox, oy = crop.origin
            st.best = q * objects[0].score
            st.objects = [
                {
                    "label": d.label,
                    "score": round(float(d.score), 4),
                    "box": [round(float(v), 1) for v in np.add(d.box, (ox, oy, ox, oy))],
                    "frame": crop.frame,
                }
                for d in objects
            ]

    def announce(self, key) -> dict | None:
        """The track's consensus when it changed since it was last said (an event's fields)."""
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

    def reset(self) -> None:
        """A new model: every live track's votes start again (its labels came from the model
        replaced) and so does its budget, less the crops still waiting (the new model answers
        them)."""
        with self.lock:
            for st in self.tracks.values():
                st.attempts, st.answered = st.pending, 0
                st.votes.clear()
                st.weight, st.objects, st.best, st.said = 0.0, [], -1.0, ""

    def counters(self) -> dict:
        with self.lock:
            live = [st.attempts for st in self.tracks.values() if st.counted]
            tracks, attempts = self.ended_tracks + len(live), self.ended_attempts + sum(live)
            return {
                "calls": self.calls,
                "crops": self.crops,
                "batches": self.batches,
                "refused_size": self.refused_size,
                "dropped": self.dropped,
                "tracks_attempted": self.tracks_attempted,
                "attempts_per_track": round(attempts / tracks, 3) if tracks else 0.0,
                "most_attempts": self.most,
            }


def _input_side(model) -> int:
    """The shorter side of the secondary's input (what a crop is scaled to)."""
    pre = getattr(model, "preprocessing", None)
    size = getattr(pre, "size", None)
    if size:
        return int(min(size))
    return 64


class SecondaryStage:
    """Every secondary of a run, its worker thread and queue (see the module's text)."""

    def __init__(self, secondaries: list) -> None:
        self.secondaries = secondaries
        self.cond = threading.Condition()
        self.queue: collections.deque = collections.deque()  # (secondary, [crops]) per batch
        self.waiting = 0  # crops in the queue
        self.busy = False
        self.closed = False
        self.batches = 0  # queue items (primary batches that gave crops) per secondary
        self.errors: list[str] = []
        self._batch = None  # the primary batch the output thread is collecting for
        self._seen = 0
        self._collect: dict = {}  # secondary -> crops of the current primary batch
        self.thread = threading.Thread(target=self._work, name="secondary", daemon=True)
        self.thread.start()

    # --- the output thread -------------------------------------------------------------
    def on_frame(self, frame, handler) -> None:
        """After tracking: the crops this frame gives; the batch handed over once all its frames
        came; the tracks' labels onto its objects and events."""
        if frame.batch != self._batch:
            self._flush()
            self._batch, self._seen = frame.batch, 0
        self._seen += 1
        picture = frame.picture
        if frame.inferred and picture is not None:
            for t in frame.tracks:
                if t.detection is None or t.predicted:
                    continue
                for s in self.secondaries:
                    crop = s.consider(frame, t, picture, time.monotonic())
                    if crop is not None:
                        self._collect.setdefault(s, []).append(crop)
        ended = [(frame.stream, e["track_id"]) for e in frame.events if e["event"] == "track_end"]
        for key in ended:
            for s in self.secondaries:
                crop = s.ending(key)
                if crop is not None:
                    self._collect.setdefault(s, []).append(crop)
        if self._seen >= frame.batch_frames:
            self._flush()
        self.label(frame)
        for key in ended:
            for s in self.secondaries:
                s.forget(key)
        for event in self.announcements(frame.stream):  # consensus reached or changed
            handler.post_event(event)

    def label(self, frame) -> None:
        """Each tracked object and each event of a track with the tracks' consensus so far."""
        r = frame.results
        if r is not None and r.objects:
            objects = []
            for d in r.objects:
                found = self._extras(frame.stream, d.track_id) if d.track_id is not None else {}
                objects.append(d.with_extras(**found) if found else d)
            frame.results = r.replace(objects=objects)
        self.enrich(frame.events, frame.stream)

    def enrich(self, events: list, stream: int | None = None) -> list:
        for e in events:
            if e.get("track_id") is None or e.get("event") == "track_label":
                continue
            found = self._extras(e.get("stream", stream), e["track_id"], brief=True)
            if found:
                e.setdefault("secondary", found)
        return events

    def _extras(self, stream, track_id, brief: bool = False) -> dict:
        out = {}
        for s in self.secondaries:
            x = s.extras((stream, track_id))
            if x is not None:
                out[s.name] = {"label": x["label"], "confidence": x["confidence"]} if brief else x
        return out

    def _flush(self) -> None:
        if not self._collect:
            return
        collected, self._collect = self._collect, {}
        with self.cond:
            for s, crops in collected.items():
                self._admit(s, crops)
            self.cond.notify_all()

    def _admit(self, s: Secondary, crops: list) -> None:
        """Into the queue; when full, the lowest-quality crops waiting (these included) go."""
        self.queue.append((s, crops))
        self.waiting += len(crops)
        while self.waiting > QUEUE_CROPS:
            worst = min(((qs, c) for qs, cs in self.queue for c in cs), key=lambda x: x[1].quality)
            for item in self.queue:
                kept = [c for c in item[1] if c is not worst[1]]
                if len(kept) < len(item[1]):
                    item[1][:] = kept
                    break
            self.waiting -= 1
            worst[0].given_back(worst[1])
        for item in [i for i in self.queue if not i[1]]:  # emptied by drops
            self.queue.remove(item)

    def finish(self, timeout: float = 10.0) -> list:
        """The run ended: the crops still held (tracks still live, windows still open) are
        attempted and the worker is waited for (at most ``timeout`` seconds) so that their
        answers count; returns the label events that came of them."""
        for s in self.secondaries:
            for st in list(s.tracks.values()):
                if st.held is not None and st.attempts < s.spec.attempts:
                    self._collect.setdefault(s, []).append(s._take(st))
        self._flush()
        from edgert.apps import processes

        deadline = time.monotonic() + timeout
        with self.cond:  # a stop asked meanwhile (Ctrl-C, SIGTERM) ends the wait
            while (self.queue or self.busy) and time.monotonic() < deadline:
                if processes.stop_asked():
                    break
                self.cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        return self.announcements()

    def announcements(self, stream: int | None = None) -> list:
        """``track_label`` events of the tracks (of ``stream``) whose consensus changed."""
        out = []
        for s in self.secondaries:
            for key in [k for k in list(s.tracks) if stream is None or k[0] == stream]:
                said = s.announce(key)
                if said is not None:
                    out.append(
                        dict(
                            event="track_label",
                            stream=key[0],
                            track_id=key[1],
                            **said,
                            t_monotonic=round(time.monotonic(), 4),
                            time=round(time.time(), 4),
                        )
                    )
        return out

    def find(self, name: str) -> Secondary | None:
        return next((s for s in self.secondaries if s.name == name), None)

    def replace(self, s: Secondary, model, bundle: str) -> bool:
        """``s`` runs ``model`` (from ``bundle``) from its next call on: swapped between two calls
        of the worker, the live tracks' attempts and votes started again, the old model closed.
        False when the run ended meanwhile (``model`` is closed, not used)."""
        from dataclasses import replace

        with self.cond:
            while self.busy and not self.closed:
                self.cond.wait()
            taken = not self.closed
            if not taken:  # the run ended meanwhile: the candidate is not used
                old = model
            else:
                old = s.model
                s.use(model)
                s.spec = replace(s.spec, bundle=bundle)
                s.swaps += 1
                s.failed = None  # a model that failed is replaced: it runs again
                s.reset()
        old.close()
        return taken

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join(60.0)  # the call in progress finishes before its model is closed
        if self.thread.is_alive():
            log.warning("a secondary's call did not end within 60 s; its model is left open")
            return
        for s in self.secondaries:
            s.model.close()

    # --- the worker ---------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self.cond:
                while not self.queue and not self.closed:
                    self.cond.wait()
                if self.closed:
                    return
                s, crops = self.queue.popleft()
                self.waiting -= len(crops)
                self.busy = True
                self.batches += 1
            try:
                if s.failed:
                    s.unanswered(crops)
                elif crops:
                    s.run(crops)
            except Exception as exc:  # noqa: BLE001 - a secondary never stops the primary
                s.unanswered(crops)
                s.failed = str(exc)
                log.warning("--secondary %s failed: %s; it runs no more", s.name, exc)
                self.errors.append(f"{s.name}: {exc}")
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def report(self) -> list:
        out = []
        for s in self.secondaries:
            out.append(
                {
                    "name": s.name,
                    "bundle": s.spec.bundle,
                    "task": s.model.task,
                    "swaps": s.swaps,
                    **s.counters(),
                }
            )
        return out


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
                spec, f"a {model.task} model: a secondary is a classifier or finds boxes", say
            )
            model.close()
            continue
        manifest = getattr(model, "manifest", None)
        name = spec.name or getattr(manifest, "name", None) or _stem(spec.bundle)
        if not NAME.fullmatch(name) or name in RESERVED:
            name = "secondary"
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
    return bool(kind.class_scores or kind.boxes)


def _not_loaded(spec, why: str, say) -> None:
    from edgert.apps.uris import escape_controls

    line = escape_controls(
        f"--secondary {spec.bundle}: not loaded ({why}); the camera runs without it"
    )
    say(line)
    log.warning("%s", line)


def _stem(path: str) -> str:
    from pathlib import Path

    return Path(path).name.split(".")[0]
