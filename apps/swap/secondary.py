"""A secondary's swap (``POST /model`` with ``{"secondary": NAME, "bundle": PATH}``): the
primary's swap queue (:class:`~edgert.apps.swapping.SwapQueue`) and its rules, one queue and one
thread per secondary, made when the run starts.

    POST      the endpoint's own checks (--model-endpoint, a JSON body naming a bundle,
              ``"force"`` a JSON boolean, no NUL, inside --allow-models): 202 with the
              request's number, or why not
    queue     one load at a time; a request still waiting when a later one comes is dropped,
              never loaded (a ``model_swap_superseded`` event and a line say so): the last
              request POSTed is the model that runs, whatever the loads' times
    load      where the path leads now (checked against --allow-models again), loaded as the
              run loads a secondary; a model of another kind (a detector for a classifier) is
              refused (``model_swap_refused``) and the model in use goes on
    replace   between two calls of the secondary's worker: the live tracks' votes start again,
              the old model is closed and its memory given back to the system

A secondary has no shadow check, so ``"force"`` changes nothing; SIGHUP re-reads the primary's
bundle only.
"""

from __future__ import annotations

import threading
import time

from edgert.apps.swapping import SwapQueue, give_back_memory
from edgert.runtime.errors import EdgertError


class SecondarySwap(SwapQueue):
    """The swap queue of one secondary ``s`` of ``stage`` (a :class:`.secondary.SecondaryStage`);
    ``load(path)`` loads a bundle as the run loads its secondaries."""

    COMMAND = "edgert camera"
    SUPERSEDE = True

    def __init__(self, stage, s, load, options, roots, say, post_event) -> None:
        self.stage, self.s, self.load = stage, s, load
        self.lock = threading.Lock()
        self.superseded = 0
        self._queue(options, roots, say, post_event, f"secondary-swap-{s.name}")

    def report(self) -> dict:
        with self.lock:
            return {
                "name": self.s.name,
                "bundle": self.s.spec.bundle,
                "task": self.s.model.task,
                "swaps": self.s.swaps,
                "refusals": self.refusals,
                "superseded": self.superseded,
                "busy": self.busy or bool(self.requests),
                "last": self.last,
            }

    def close(self) -> None:
        self._stop_thread(60)

    def reread(self, why: str) -> None:
        """SIGHUP: the primary's bundle is read again, not a secondary's."""

    def _event(self, event: str, path: str, why: str) -> dict:
        return {"event": event, "secondary": self.s.name, "bundle": path, "requested_by": why}

    def _superseded(self, path: str, why: str, by: str) -> None:
        with self.lock:
            self.superseded += 1
        self._said(
            {**self._event("model_swap_superseded", path, why), "by": by},
            f"secondary {self.s.name}: {path} not loaded (superseded by {by}, requested later)",
        )

    def _swap(self, path: str, why: str, force: bool) -> None:
        from edgert.runtime.tasks import task_spec

        t0 = time.monotonic()
        try:
            real, _ = self.candidate(path, why)  # where the link leads now, checked
            model = self.load(real)
        except (EdgertError, OSError) as exc:
            return self._refuse(path, why, str(exc), t0)
        old, new = task_spec(self.s.model.task), task_spec(model.task)
        if (old.class_scores, old.boxes) != (new.class_scores, new.boxes):
            reason = f"a {model.task} model cannot replace a {self.s.model.task} one"
            model.close()
            return self._refuse(path, why, reason, t0)
        if not self.stage.replace(self.s, model, path):  # the run ended meanwhile
            return None
        give_back_memory()  # what the old model held goes back to the system
        with self.lock:
            self.swaps += 1
        event = {**self._event("model_swap", path, why), "s": round(time.monotonic() - t0, 3)}
        self._said(event, f"secondary {self.s.name}: now {path}")
        return None

    def _refuse(self, path, why, reason: str, t0: float, check: dict | None = None) -> None:
        with self.lock:
            self.refusals += 1
        event = {**self._event("model_swap_refused", path, why), "reason": reason}
        event["s"] = round(time.monotonic() - t0, 3)
        self._said(
            event, f"secondary {self.s.name}: {path} refused ({reason}); the model in use goes on"
        )


def start_swaps(run, stage) -> dict:
    """One :class:`SecondarySwap` per secondary of ``stage``, started (stopped when the run
    ends, before the stage closes): name -> queue."""
    from edgert.runtime.tasks import load_task_model

    def load(path):
        return load_task_model(path, None, run.cfg.model.backend, "auto", spin=False)

    slot, queues = run.slot, {}
    for s in stage.secondaries:
        q = SecondarySwap(stage, s, load, slot.o, slot.roots, run.say, run.handler.post_event)
        queues[s.name] = q.start()
        run.stack.callback(q.close)
    return queues
