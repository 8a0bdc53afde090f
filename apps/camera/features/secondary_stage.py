"""The stage that runs every secondary of a run (:class:`SecondaryStage`): the crops the output
thread collects per primary batch, the queue to the secondaries' worker thread (at most
``QUEUE_CROPS`` crops and ``QUEUE_BYTES`` of images: a crop that does not fit drops the
lowest-quality one waiting), the worker, and the tracks' labels onto the objects and events.
See :mod:`.secondary_models`."""

from __future__ import annotations

import collections
import logging
import threading
import time

from edgert.runtime.events import Event, kind_of

log = logging.getLogger(__name__)
QUEUE_CROPS = 64  # crops waiting for the worker at most (then the lowest quality is dropped)
QUEUE_BYTES = 64 << 20  # and their images' bytes at most (likewise)


class SecondaryStage:
    """Every secondary of a run, its worker thread and queue (see the module's text)."""

    def __init__(self, secondaries: list) -> None:
        self.secondaries = secondaries
        self.cond = threading.Condition()
        self.queue: collections.deque = collections.deque()  # (secondary, [crops]) per batch
        self.waiting = 0  # crops in the queue
        self.waiting_bytes = 0  # their images' bytes
        self.busy = False
        self.closed = False
        self.batches = 0  # queue items (primary batches that gave crops) per secondary
        self.errors: list[str] = []
        self._batch = None  # the primary batch the output thread is collecting for
        self._seen = 0
        self._collect: dict = {}  # secondary -> crops of the current primary batch
        self.now: dict = {}  # stream -> its latest frame's scene time (re-identification's clock)
        self.reids: dict = {}  # an embedder secondary -> its re-identification across streams
        for s in secondaries:
            if getattr(s, "embeds", False) and s.spec.reid > 0:
                from .reid import Reid

                self.reids[s] = Reid(s.spec.reid, s.spec.reid_window_s)
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
        self._seen_now(frame)
        if frame.inferred and picture is not None:
            for t in frame.tracks:
                if t.detection is None or t.predicted:
                    continue
                for s in self.secondaries:
                    crop = s.consider(frame, t, picture, time.monotonic())
                    if crop is not None:
                        self._collect.setdefault(s, []).append(crop)
        ended = [(frame.stream, e["track_id"]) for e in frame.events if kind_of(e) == "track_end"]
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

    def _seen_now(self, frame) -> None:
        """Re-identification's clock (the stream's scene time) and the tracks on the frame."""
        self.now[frame.stream] = frame.t_scene
        for reid in self.reids.values():
            for t in frame.tracks:
                reid.seen((frame.stream, t.track_id), frame.t_scene)

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
            if e.get("track_id") is None or kind_of(e) == "track_label":
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

    def _admit(self, s, crops: list) -> None:
        """Into the queue; when full, the lowest-quality crops waiting (these included) go."""
        self.queue.append((s, crops))
        self.waiting += len(crops)
        self.waiting_bytes += sum(c.image.nbytes for c in crops)
        while self.waiting > QUEUE_CROPS or self.waiting_bytes > QUEUE_BYTES:
            worst = min(((qs, c) for qs, cs in self.queue for c in cs), key=lambda x: x[1].quality)
            for item in self.queue:
                kept = [c for c in item[1] if c is not worst[1]]
                if len(kept) < len(item[1]):
                    item[1][:] = kept
                    break
            self.waiting -= 1
            self.waiting_bytes -= worst[1].image.nbytes
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
        """``track_label`` events of the tracks (of ``stream``) whose consensus changed (an
        embedder's: ``track_embedding``, and ``track_reid`` for the links it makes)."""
        out = []
        for s in self.secondaries:
            for key in [k for k in list(s.tracks) if stream is None or k[0] == stream]:
                said = s.announce(key)
                if said is None:
                    continue
                said["t_monotonic"] = round(time.monotonic(), 4)
                unit = said.pop("unit", None)
                kind = "track_embedding" if unit is not None else "track_label"
                out.append(Event(kind, key[0], key[1], round(time.time(), 4), said).to_record())
                reid = self.reids.get(s)
                if reid is not None and unit is not None:
                    out += self._links(s, reid, key, unit)
        return out

    def _links(self, s, reid, key, unit) -> list:
        """``track_reid`` events of the links ``key``'s new vector makes (see :mod:`.reid`)."""
        out = []
        for other, sim in reid.offer(key, unit, self.now.get(key[0], 0.0)):
            fields = {
                "other_stream": other[0],
                "other_track_id": other[1],
                "similarity": round(sim, 4),
                "secondary": s.name,
                "t_monotonic": round(time.monotonic(), 4),
            }
            out.append(
                Event("track_reid", key[0], key[1], round(time.time(), 4), fields).to_record()
            )
        return out

    def find(self, name: str):
        return next((s for s in self.secondaries if s.name == name), None)

    def replace(self, s, model, bundle: str) -> bool:
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
                # the bundle first: a text search between the two lines loads the new bundle's
                # tower under the old model, and loads it again at its next text (never the
                # old bundle's tower kept for the new model)
                s.spec = replace(s.spec, bundle=bundle)
                s.use(model)
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
                self.waiting_bytes -= sum(c.image.nbytes for c in crops)
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
