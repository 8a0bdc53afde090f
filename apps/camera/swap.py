"""A new model for a running ``edgert camera`` without a dark minute: hot-swap with a shadow check
and automatic rollback.

    request   SIGHUP (the bundle path read again: a symlink or folder that deployment tools
              replace atomically), a change of that path (``--watch-model``), or ``POST /model``
              on the metrics / web viewer port (``--model-endpoint``; only bundles under
              ``--allow-models`` folders, by default the running bundle's own folder)
    load      the candidate bundle is read, loaded and run once on the last frame seen (its plan
              built, on TensorRT) in the swap thread, while every stream is served by the model
              in use; a bundle that cannot be loaded, or is of a task the run cannot follow
              (tracking, lines and zones need a detector), is refused in one sentence
    check     ``--swap-check``: the candidate runs on a sample of live frames beside the model in
              use (one frame at a time, through the same power / temperature caps) and is
              compared with the measures the INT8 gate uses: top-1 agreement for classifiers,
              box F1 (IoU >= 0.5, same label) for detectors, and each label's detection rate; it is
              promoted within the bounds, else refused (``POST /model`` with ``"force": true``
              promotes it anyway)
    promote   the frames prepared from then on go to the new model: each frame carries the model
              it was prepared for (its input size, its postprocessing), so a batch that straddles
              the swap runs in two parts and no frame is dropped or processed twice
    rollback  for ``--rollback-window`` seconds the new model's detection rate and mean
              confidence per label are compared with the old one's over the same time before the
              swap; one falling under ``--rollback-below`` of it (a collapse) puts the old model
              back, which stays loaded until then; afterwards it is closed (its sessions, plans
              and buffers freed) once no frame of it is in flight

Trackers keep their IDs (the same labels go on being tracked) and counters are never reset by a
swap. Every result line and event carries the model that made it (``name@version#hash``); each
swap, refusal and rollback is an event; ``edgert_model_info`` and the swap counters are metrics.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from pathlib import Path

from edgert.apps.swapping import (
    EVENTS,
    Loaded,
    SwapOptions,
    agreement,
    fingerprint,
    give_back_memory,
    json_answer,
    judge,
    model_info,
    refuse_to_compare,
)
from edgert.apps.uris import escape_controls
from edgert.runtime.errors import EdgertError
from edgert.runtime.tasks import task_spec

log = logging.getLogger(__name__)

__all__ = ["EVENTS", "Loaded", "ModelSlot", "SwapOptions", "fingerprint", "model_info"]


def _observed(task: str, results) -> list:
    """(label, score) pairs a frame's results count for: a classifier's top-1, each detection."""
    if not isinstance(results, list):
        return []
    pairs = [(str(r.get("label")), float(r.get("score", 0.0))) for r in results if "label" in r]
    return pairs[:1] if task == "classify" else pairs


def _rates(recent: list, since: float, until: float) -> tuple[int, dict]:
    """Frames between ``since`` and ``until``, and per label (count, mean score)."""
    frames, sums = 0, collections.defaultdict(lambda: [0, 0.0])
    for t, pairs in recent:
        if since <= t <= until:
            frames += 1
            for label, score in pairs:
                sums[label][0] += 1
                sums[label][1] += score
    return frames, {k: (n, s / n) for k, (n, s) in sums.items() if n}


class ModelSlot:
    """The model a running camera uses, and the swap thread that replaces it (see the module's
    text). ``take`` / ``infer`` / ``done`` are the pipeline steps' hooks (:func:`slot_steps`);
    ``request`` asks for a swap (safe from a signal handler); events go to ``post_event``."""

    SAMPLE_GAP_S = 0.1  # shadow-check frames at least this far apart
    MIN_FRAMES_TO_JUDGE = 30  # a rollback is judged on at least this many frames of each model

    def __init__(
        self,
        current: Loaded,
        load,
        options: SwapOptions,
        runner=None,
        say=lambda s: None,
        post_event=lambda e: None,
        needs_detector: bool = False,
        watch_path: str | None = None,
        seen: tuple | None = None,
    ) -> None:
        self.current = current
        self.watch_path = watch_path or current.path  # what SIGHUP and --watch-model read
        self.load, self.o, self.runner = load, options, runner
        self.say, self.post_event = say, post_event
        self.needs_detector = needs_detector
        self.previous: Loaded | None = None
        self.promoted_at: float | None = None
        self.lock = threading.Lock()
        self.infer_lock = threading.Lock()  # the live batches and the shadow check, one at a time
        self.requests: collections.deque = collections.deque()
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.swaps = self.rollbacks = self.refusals = 0
        self.last: dict | None = None  # the last swap, refusal or rollback
        self.busy = False
        self.last_image = None
        self.samples: collections.deque | None = None  # (image, results) while a check runs
        self._sampled_at = 0.0
        # the path as it was before the model in use was read from it (else as it is now)
        self._seen = seen if seen is not None else fingerprint(self.watch_path)
        self.thread = threading.Thread(target=self._run, name="model-swap", daemon=True)
        self.roots = [
            os.path.realpath(r) for r in (options.allow or (str(Path(current.path).parent),))
        ]

    # -- the pipeline's hooks --------------------------------------------------------------------
    def take(self) -> Loaded:
        with self.lock:
            loaded = self.current
            loaded.in_flight += 1
            return loaded

    def infer(self, loaded: Loaded, batch):
        with self.infer_lock:
            if self.runner is not None:
                return self.runner.infer(batch, loaded.model)
            return loaded.model.infer(batch)

    def done(self, frames: list, inferred: bool = True) -> None:
        """Frames of ``take`` finished (or dropped before inference: not ``inferred``)."""
        now = time.monotonic()
        keep = max(self.o.rollback_s, 1.0) * 2
        with self.lock:
            for f in frames:
                loaded, f.model = f.model, None if not inferred else f.model
                if loaded is None:
                    continue
                loaded.in_flight -= 1
                if not inferred:
                    continue
                loaded.recent.append((now, _observed(loaded.model.task, f.results)))
                while loaded.recent and loaded.recent[0][0] < now - keep:
                    loaded.recent.popleft()
            if frames and inferred:
                self.last_image = frames[-1].image
                if self.samples is not None and now - self._sampled_at >= self.SAMPLE_GAP_S:
                    f = frames[-1]
                    if f.model is self.current:
                        self.samples.append((f.image, f.results))
                        self._sampled_at = now

    def label_of(self, frame) -> str:
        loaded = getattr(frame, "model", None) or self.current
        return loaded.label

    # -- requests ------------------------------------------------------------------------------
    def request(self, path: str, why: str, force: bool = False) -> int:
        """Queue a swap to ``path`` (done in order, each fully); its number."""
        self.requests.append((str(path), why, force))
        self.wake.set()
        return self.swaps + self.refusals + len(self.requests)

    def allowed(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def http_post(self, body: bytes) -> tuple[int, bytes, str]:
        """``POST /model`` with ``{"bundle": PATH, "force": false}``."""
        if not self.o.endpoint:
            off = "POST /model is off: start edgert camera with --model-endpoint"
            return json_answer(404, {"error": off})
        try:
            data = json.loads(body or b"{}")
            path = data["bundle"]
            force = bool(data.get("force", False))
            if not isinstance(path, str) or not path:
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
            return json_answer(
                400, {"error": 'the body is JSON naming a bundle: {"bundle": "/path"}'}
            )
        if not self.allowed(path):
            where = ", ".join(self.roots)
            return json_answer(
                403, {"error": f"{path} is not in a folder --allow-models names ({where})"}
            )
        n = self.request(path, "POST /model", force)
        return json_answer(202, {"accepted": True, "request": n, "bundle": path})

    def http_get(self, _body: bytes = b"") -> tuple[int, bytes, str]:
        return json_answer(200, self.report())

    def report(self) -> dict:
        with self.lock:
            return {
                "model": self.current.describe(),
                "previous": self.previous.describe() if self.previous else None,
                "swaps": self.swaps,
                "rollbacks": self.rollbacks,
                "refusals": self.refusals,
                "busy": self.busy or bool(self.requests),
                "last": self.last,
            }

    # -- the swap thread -----------------------------------------------------------------------
    def start(self) -> ModelSlot:
        self.thread.start()
        return self

    def close(self) -> None:
        self.stopped.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(30)
        with self.lock:
            others = [m for m in (self.previous,) if m is not None and m is not self.current]
            self.previous = None
        for m in others:
            m.close()

    def _run(self) -> None:
        last_poll = time.monotonic()
        while not self.stopped.is_set():
            self.wake.wait(0.25)
            self.wake.clear()
            if self.stopped.is_set():
                break
            if self.o.watch and time.monotonic() - last_poll >= self.o.poll_s:
                last_poll = time.monotonic()
                seen = fingerprint(self.watch_path)
                if seen != self._seen:
                    self._seen = seen
                    self.request(self.watch_path, "--watch-model")
            self._watch_rollback()
            while self.requests and not self.stopped.is_set():
                path, why, force = self.requests.popleft()
                self.busy = True
                try:
                    self._swap(path, why, force)
                except Exception as exc:  # noqa: BLE001 - a swap never ends the run
                    self._refuse(path, why, f"{type(exc).__name__}: {exc}", time.monotonic())
                finally:
                    self.busy = False

    def _swap(self, path: str, why: str, force: bool) -> None:
        t0 = time.monotonic()
        try:
            info = model_info(path)
        except EdgertError as exc:
            return self._refuse(path, why, str(exc), t0)
        if path == self.watch_path:  # what --watch-model compares with: the bundle now read
            self._seen = fingerprint(path)
        if info == self.current.info:
            self.say(f"model: {path} is the model in use ({why}); nothing to swap")
            return None
        self._settle()  # a previous model still kept for rollback goes first: one spare at most
        try:
            model = self.load(path)
        except (EdgertError, OSError) as exc:
            return self._refuse(path, why, str(exc), t0)
        candidate = Loaded(model, info, path)
        try:
            cannot = self._cannot_follow(candidate)  # never forced: the run could not go on
            problem, check = (cannot, None) if cannot else self._check(candidate)
            if problem is not None and (cannot or not force):
                candidate.close()
                return self._refuse(path, why, problem, t0, check)
        except BaseException:
            candidate.close()
            raise
        with self.lock:
            old, self.current = self.current, candidate
            self.previous, self.promoted_at = old, time.monotonic()
            self.swaps += 1
        event = {
            "event": "model_swap",
            "from": old.label,
            "to": candidate.label,
            "bundle": path,
            "requested_by": why,
            "load_s": round(time.monotonic() - t0, 3),
            "forced": bool(force and problem),
        }
        if check is not None:
            event["check"] = check
        self._said(event, f"model: now {candidate.label} (was {old.label}; {why})")
        if self.o.rollback_s <= 0:
            self._settle()
        return None

    def _cannot_follow(self, candidate: Loaded) -> str | None:
        """Why the run cannot use the candidate, or None; it runs once on the last frame seen
        (a plan is built, a broken model fails here, not in the live batches)."""
        task = candidate.model.task
        if self.needs_detector and not task_spec(task).boxes:
            return (
                f"the candidate is a {task} model and this run tracks and counts, which needs a "
                "detector (a model whose results are boxes)"
            )
        image = self.last_image
        if image is not None:
            m = candidate.model
            try:
                tensor, transform = m.preprocess(image)  # beside the live batches, not
                m.postprocess(m.infer(m.collate([tensor])), [transform])  # between them
            except EdgertError as exc:
                return f"the candidate fails on a live frame: {exc}"
            except Exception as exc:  # noqa: BLE001 - a broken model, whatever it raises
                return f"the candidate fails on a live frame: {type(exc).__name__}: {exc}"
        return None

    def _check(self, candidate: Loaded) -> tuple[str | None, dict | None]:
        """``--swap-check``: (why it fails, the measures), on live frames."""
        if not self.o.check:
            return None, None
        differ = refuse_to_compare(self.current.model, candidate.model)
        if differ:
            return differ, {}
        with self.lock:
            self.samples = collections.deque(maxlen=self.o.check_frames)
        deadline = time.monotonic() + 30.0
        while len(self.samples) < self.o.check_frames and time.monotonic() < deadline:
            if self.stopped.wait(0.05):
                break
        with self.lock:
            samples, self.samples = list(self.samples), None
        if len(samples) < min(5, self.o.check_frames):
            return f"only {len(samples)} live frames came within 30 s to check the candidate", {}
        m = candidate.model
        got = []
        for image, _ in samples:
            tensor, transform = m.preprocess(image)
            got.append(m.postprocess(self.infer(candidate, m.collate([tensor])), [transform])[0])
            time.sleep(0.001)  # the live batches first
        measures = agreement(m.task, [r for _, r in samples], got)
        return judge(m.task, measures, self.o, "live frames"), measures

    def _watch_rollback(self) -> None:
        """After a swap: a collapse of the new model's rate or confidence for a label (against
        the old model's over the same time before) puts the old one back; at the window's end
        the old one is closed."""
        with self.lock:
            prev, cur, at = self.previous, self.current, self.promoted_at
        if prev is None or at is None:
            return
        now = time.monotonic()
        window = self.o.rollback_s
        old_n, old = _rates(list(prev.recent), at - window, at)
        new_n, new = _rates(list(cur.recent), at, now)
        if old_n >= self.MIN_FRAMES_TO_JUDGE and new_n >= self.MIN_FRAMES_TO_JUDGE:
            f = self.o.rollback_below
            known = getattr(cur.model, "labels", None)
            for label, (n, score) in old.items():
                if n < 10 or n / old_n < 0.05:
                    continue  # too rare to judge
                if known is not None and label not in known:
                    continue  # the new model has other classes: not a collapse of this one
                rate = new.get(label, (0, 0.0))
                new_rate, old_rate = rate[0] / new_n, n / old_n
                if new_rate < f * old_rate or (rate[0] and rate[1] < f * score):
                    why = (
                        f"{label}: {new_rate:.2f} a frame at mean confidence {rate[1]:.2f}, was "
                        f"{old_rate:.2f} at {score:.2f}"
                    )
                    return self._rollback(prev, cur, why)
        if now - at >= window:
            self._settle()

    def _rollback(self, prev: Loaded, cur: Loaded, why: str) -> None:
        with self.lock:
            self.current, self.previous, self.promoted_at = prev, cur, None
            self.rollbacks += 1
        event = {"event": "model_rollback", "from": cur.label, "to": prev.label, "reason": why}
        self._said(event, f"model: {cur.label} rolled back to {prev.label} ({why})")
        self._settle()

    def _settle(self) -> None:
        """The spare model (kept for a rollback, or rolled back from) is closed once none of its
        frames is in flight."""
        with self.lock:
            spare, self.previous, self.promoted_at = self.previous, None, None
        if spare is None or spare is self.current:
            return
        deadline = time.monotonic() + 10.0
        while spare.in_flight > 0 and time.monotonic() < deadline and not self.stopped.is_set():
            time.sleep(0.01)
        spare.close()
        give_back_memory()

    def _refuse(self, path, why, reason: str, t0: float, check: dict | None = None) -> None:
        with self.lock:
            self.refusals += 1
        event = {
            "event": "model_swap_refused",
            "bundle": str(path),
            "requested_by": why,
            "reason": reason,
            "kept": self.current.label,
            "s": round(time.monotonic() - t0, 3),
        }
        if check:
            event["check"] = check
        self._said(event, f"model: {path} refused ({reason}); {self.current.label} goes on")

    def _said(self, event: dict, sentence: str) -> None:
        self.last = {**event, "time": round(time.time(), 3)}
        self.say(escape_controls(sentence))  # a path's CR/LF cannot forge a line
        self.post_event(dict(event))
