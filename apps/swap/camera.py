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
import logging
import threading
import time
from pathlib import Path

from edgert.runtime.errors import EdgertError
from edgert.runtime.events import Event, kind_of
from edgert.runtime.tasks import task_spec

from .core import (
    EVENTS,
    Loaded,
    SwapQueue,
    Watched,
    agreement,
    catch_hangups,
    fingerprint,
    first_run_fails,
    give_back_memory,
    judge,
    model_info,
    refuse_to_compare,
)
from .options import SwapOptions

log = logging.getLogger(__name__)

__all__ = [
    "EVENTS",
    "Canary",
    "Loaded",
    "ModelSlot",
    "SwapOptions",
    "catch_hangups",
    "fingerprint",
    "model_info",
]


def _observed(task: str, result) -> list:
    """(label, score) pairs a frame's results count for (the task's ``observed`` hook: a
    classifier's top-1, each detection)."""
    return task_spec(task).pairs(result) if result is not None else []


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


class ModelSlot(SwapQueue):
    """The model a running camera uses, and the swap thread that replaces it (see the module's
    text). ``take`` / ``infer`` / ``done`` are the pipeline steps' hooks (:func:`slot_steps`);
    ``request`` asks for a swap (safe from a signal handler); events go to ``post_event``."""

    COMMAND = "edgert camera"
    COUNTS = ("swaps", "rollbacks", "refusals")
    STOP_S = 30.0
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
        self.load, self.runner = load, runner
        self.needs_detector = needs_detector
        self.previous: Loaded | None = None
        self.promoted_at: float | None = None
        self.infer_lock = threading.Lock()  # the live batches and the shadow check, one at a time
        self.rollbacks = 0
        self.last_image = None
        self.samples: collections.deque | None = (
            None  # (image, results, source_hw) while a check runs
        )
        self._sampled_at = 0.0
        # what SIGHUP and --watch-model read, as it was before the model in use was read from it
        self.watched = Watched(watch_path or current.path, seen)
        self.on_tick = None  # called from the swap thread between requests (the canary's retry)
        roots = options.allow or (str(Path(current.path).parent),)
        self._queue(options, roots, say, post_event, "model-swap")

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
                        self.samples.append((f.image, f.results, f.source_hw))
                        self._sampled_at = now

    def label_of(self, frame) -> str:
        loaded = getattr(frame, "model", None) or self.current
        return loaded.label

    # -- requests: SwapQueue's (request, allowed, POST and GET /model, report) ----------------
    def _describe(self) -> dict:
        return {
            "model": self.current.describe(),
            "previous": self.previous.describe() if self.previous else None,
        }

    def _watched(self) -> list:
        return [self.watched]

    # -- the swap thread -----------------------------------------------------------------------
    def close(self) -> None:
        super().close()
        with self.lock:
            others = [m for m in (self.previous,) if m is not None and m is not self.current]
            self.previous = None
        for m in others:
            m.close()

    def counters(self) -> list:
        return [
            *super().counters(),
            ("edgert_model_rollbacks_total", self.rollbacks, "Swaps rolled back (a collapse)"),
        ]

    def _tick(self) -> None:
        self._watch_rollback()
        if self.on_tick is not None:
            self.on_tick()

    def _swap(self, path: str, why: str, force: bool) -> None:
        t0 = time.monotonic()
        try:
            real, info = self.candidate(path, why)
        except EdgertError as exc:
            return self._refuse(path, why, str(exc), t0)
        if info == self.current.info:
            self.say(f"model: {path} is the model in use ({why}); nothing to swap")
            return None
        self._settle()  # a previous model still kept for rollback goes first: one spare at most
        try:
            [model] = self.load_candidate(real, info, why)
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
        fields = {
            "from": old.label,
            "to": candidate.label,
            "bundle": path,
            "requested_by": why,
            "load_s": round(time.monotonic() - t0, 3),
            "forced": bool(force and problem),
        }
        if check is not None:
            fields["check"] = check
        event = Event("model_swap", fields=fields)
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
        if image is None:
            return None
        return first_run_fails(candidate.model, image, "a live frame")

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
            # not a verdict on the candidate (a camera still connecting, a quiet gated scene)
            why = f"only {len(samples)} live frames came within 30 s to check the candidate"
            return why, {"frames": len(samples), "judged": False}
        m = candidate.model
        got = []
        for image, _, source_hw in samples:  # source_hw: the decoder scaled it (see Frame)
            tensor, transform = m.preprocess(image, source_hw)
            got.append(m.postprocess(self.infer(candidate, m.collate([tensor])), [transform])[0])
            time.sleep(0.001)  # the live batches first
        measures = agreement(m.task, [r for _, r, _ in samples], got)
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
        fields = {"from": cur.label, "to": prev.label, "reason": why}
        event = Event("model_rollback", fields=fields)
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

    def _kept(self) -> tuple[dict, str]:
        label = self.current.label
        return {"kept": label}, f"{label} goes on"


class Canary:
    """``--check-against PREVIOUS``: a rollout's canary. The run starts on PREVIOUS (the model the
    new one replaces) and asks its slot for the run's own bundle, which goes through the swap's
    check on live frames; called by /ready, it objects until that model serves: "checking"
    while the swap runs, the refusal's reason after, with the model that goes on serving the
    cameras meanwhile. A check that could not judge (too few live frames: a camera still
    connecting, a quiet gated scene) is tried again every ``RETRY_S``; a disagreement is final.
    Once the model served, only its rollback objects (a later swap to a third model is not the
    canary's business). A pod with no previous model is not given one: it is judged as every run
    is, ready once its model has answered."""

    RETRY_S = 10.0

    def __init__(self, slot: ModelSlot, target: str) -> None:
        self.slot, self.target = slot, target
        self.info = model_info(target)  # the new model as the slot will name it
        self.served: str | None = None  # its label, once it served
        self.attempts = 0

    def start(self) -> None:
        self.slot.on_tick = self._tick
        self._ask()

    def _ask(self) -> None:
        self.attempts += 1
        why = (
            "--check-against" if self.attempts == 1 else f"--check-against, attempt {self.attempts}"
        )
        self.slot.request(self.target, why)

    def _is_target(self, loaded: Loaded) -> bool:
        return loaded.path == self.target or loaded.info == self.info

    def _tick(self) -> None:
        """The swap thread, between requests: ask again after a check that could not judge."""
        slot = self.slot
        last = slot.last
        if self.served or slot.requests or last is None or _judged(last):
            return
        if time.time() - last.get("time", 0.0) >= self.RETRY_S:
            self._ask()

    def __call__(self) -> tuple[bool, dict] | None:
        slot = self.slot
        with slot.lock:
            current, last = slot.current, slot.last
        if self._is_target(current):
            self.served = current.label
            return None
        if self.served is not None:  # it served: only its own rollback objects
            if last and kind_of(last) == "model_rollback" and last.get("from") == self.served:
                why = (
                    f"{self.served} was rolled back ({last.get('reason')}); {current.label} serves"
                )
                return False, {"reason": why, "serving": current.label, "last": last}
            return None
        if slot.busy or slot.requests or last is None or not _judged(last):
            why = f"checking {self.target} against {current.label} on live frames"
            if last is not None and not _judged(last):
                why += f" (attempt {self.attempts}; before: {last.get('reason')})"
            return False, {"reason": why, "serving": current.label}
        said = last.get("reason") or kind_of(last)
        why = f"{self.target} was not taken ({said}); {current.label} serves the cameras"
        return False, {"reason": why, "serving": current.label, "last": last}


def _judged(event: dict) -> bool:
    """Whether a swap event is a verdict (not a check that had too few frames to judge)."""
    return (event.get("check") or {}).get("judged", True)
