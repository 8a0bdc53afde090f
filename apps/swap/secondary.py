"""A secondary's swap (``POST /model`` with ``{"secondary": NAME, "bundle": PATH}``): the
primary's swap queue (:class:`~.core.SwapQueue`) and its rules, one queue and one thread per
secondary, made when the run starts; and the camera's ``GET`` / ``POST /model`` routes, which
read the body once and send it to the primary's slot or to the secondary it names.

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

import time

from edgert.apps.telemetry.http import json_answer
from edgert.runtime.errors import EdgertError

from .core import SwapQueue, give_back_memory, json_body


class SecondarySwap(SwapQueue):
    """The swap queue of one secondary ``s`` of ``stage`` (a camera ``SecondaryStage``);
    ``load(path)`` loads a bundle as the run loads its secondaries."""

    COMMAND = "edgert camera"
    SUPERSEDE = True
    COUNTS = ("swaps", "refusals", "superseded")

    def __init__(self, stage, s, load, options, roots, say, post_event) -> None:
        self.stage, self.s, self.load = stage, s, load
        self.superseded = 0
        self._queue(options, roots, say, post_event, f"secondary-swap-{s.name}")

    def _describe(self) -> dict:
        return {"name": self.s.name, "bundle": self.s.spec.bundle, "task": self.s.model.task}

    def _who(self) -> tuple[dict, str]:
        return {"secondary": self.s.name}, f"secondary {self.s.name}"

    def _superseded(self, path: str, why: str, by: str) -> None:
        with self.lock:
            self.superseded += 1
        self._said(
            self._event("model_swap_superseded", path, why, by=by),
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
        event = self._event("model_swap", path, why, s=round(time.monotonic() - t0, 3))
        self._said(event, f"secondary {self.s.name}: now {path}")
        return None


class ModelRoutes:
    """A camera's ``GET`` and ``POST /model``: the body is read once; one naming
    ``"secondary"`` goes to that secondary's queue (404 naming the secondaries otherwise), any
    other to the primary's slot. ``GET`` adds the secondaries to the slot's report."""

    def __init__(self, slot, stage=None, queues=None) -> None:
        self.slot, self.stage, self.queues = slot, stage, queues or {}

    def table(self) -> dict:
        return {("GET", "/model"): self.get, ("POST", "/model"): self.post}

    def post(self, body: bytes) -> tuple[int, bytes, str]:
        data = json_body(body)
        if not (isinstance(data, dict) and "secondary" in data):
            return self.slot.post(data)
        if self.stage is None:  # never the primary's swap
            return json_answer(404, {"error": "this camera runs no --secondary"})
        if not self.slot.o.endpoint:
            return self.slot.off()
        name = data.get("secondary")
        queue = self.queues.get(name) if isinstance(name, str) else None
        if queue is None:
            names = ", ".join(x.name for x in self.stage.secondaries)
            return json_answer(
                404, {"error": f"no secondary is named {name!r} (there are: {names})"}
            )
        return queue.post(data, secondary=name)

    def get(self, _body: bytes = b"") -> tuple[int, bytes, str]:
        answer = self.slot.report()
        if self.stage is not None:
            answer["secondary"] = [
                self.queues[s.name].report()
                if s.name in self.queues
                else {"name": s.name, "bundle": s.spec.bundle, "task": s.model.task, "swaps": 0}
                for s in self.stage.secondaries
            ]
        return json_answer(200, answer)


def start_swaps(run, stage) -> dict:
    """With ``--model-endpoint``, one :class:`SecondarySwap` per secondary of ``stage`` (or
    None), started (stopped when the run ends, before the stage closes): name -> queue."""
    from edgert.runtime.tasks import load_task_model

    def load(path):
        return load_task_model(path, None, run.cfg.model.backend, "auto", spin=False)

    slot, queues = run.slot, {}
    if stage is not None and slot.o.endpoint:
        for s in stage.secondaries:
            q = SecondarySwap(stage, s, load, slot.o, slot.roots, run.say, run.handler.post_event)
            queues[s.name] = q.start()
            run.stack.callback(q.close)
    return queues
