"""What every swap shares: what names a model (:func:`model_info`: name, version, a hash of what
runs), the queue of requests and its thread (:class:`SwapQueue`: SIGHUP, ``--watch-model``,
``POST /model``, refusals and events), the shadow check's measures (:func:`agreement`,
:func:`judge`: those of the INT8 gate) and giving memory back after a model is closed. The options
are :mod:`.options`; the camera's slot and canary :mod:`.camera`, its secondaries' swaps
:mod:`.secondary`, Triton's swapper :mod:`.serve`."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import signal
import threading
import time
from pathlib import Path

from edgert.apps.telemetry.http import json_answer
from edgert.apps.uris import escape_controls
from edgert.runtime.bundle import MAX_MANIFEST_BYTES
from edgert.runtime.errors import ModelError
from edgert.runtime.events import Event
from edgert.runtime.regular import NotRegular, open_regular, read_regular
from edgert.runtime.tasks import task_spec

from .options import SwapOptions

EVENTS = ("model_swap", "model_swap_refused", "model_rollback")
POSTED = "POST /model"  # what a request by the endpoint is named by
_hangups = [0]  # SIGHUPs counted by catch_hangups' handler (which does nothing else)


def catch_hangups():
    """From now on SIGHUP means "read the bundle path(s) again", whatever the run is doing (it
    loads a model, measures clocks, streams): the handler only counts it (a handler that took a
    lock the code it interrupted held deadlocked the main thread under a burst of SIGHUPs), and
    the swap thread re-reads once for each burst when it runs. Returns what puts the handler
    before back. Main thread only (elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGHUP"):
        return lambda: None
    _hangups[0] = 0

    def counted(_signum, _frame) -> None:
        _hangups[0] += 1

    old = signal.signal(signal.SIGHUP, counted)
    return lambda: signal.signal(signal.SIGHUP, old)


def _hash_file(digest, path: Path) -> None:
    """Only a regular file is read (a FIFO or a device could block or never end)."""
    try:
        f = open_regular(path)
    except NotRegular as exc:
        raise ValueError(f"{path.name} {exc}") from None
    with f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def _inside(real: str, roots) -> bool:
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def model_info(path: str | Path, roots=None) -> dict:
    """What names a model: the bundle's name, its version (the manifest's ``version``, else when
    it was exported) and a hash of what runs: its manifest and every network file it names (not
    the plans cached beside them), read where their links lead, so a bundle whose model was
    replaced under the same manifest is another model; for a bare .onnx / .engine file, its name
    and contents' hash. Only regular files are read, the manifest within its size bound. With
    ``roots`` (``--allow-models``), a file whose link leads outside them is refused. ModelError
    when it cannot be read."""
    p = Path(path)
    try:
        digest = hashlib.sha256()
        if not p.is_dir():
            _hash_file(digest, p)
            return {"name": p.stem, "version": "", "hash": digest.hexdigest()[:12]}
        try:
            raw = read_regular(p / "manifest.json", MAX_MANIFEST_BYTES)
        except NotRegular as exc:
            raise ValueError(f"its manifest.json {exc}") from None
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("its manifest.json is not a JSON object")
        digest.update(raw)
        hashes = data.get("hashes") or {}
        named = sorted(str(k) for k in (hashes if isinstance(hashes, dict) else {}))
        for name in [n for n in named if n not in ("source", "weights")] or ["model.onnx"]:
            parts = name.split("/")
            if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
                raise ValueError(f"its manifest names {name[:60]!r}, not a file of the bundle")
            file = p / name
            if not os.path.lexists(file):
                continue
            real = os.path.realpath(file)
            if roots is not None and not _inside(real, roots):
                raise ValueError(f"its {name} leads outside the folders --allow-models names")
            digest.update(name.encode() + b"\0")
            _hash_file(digest, Path(real))
        return {
            "name": str(data.get("name") or p.stem),
            "version": str(data.get("version") or data.get("created") or ""),
            "hash": digest.hexdigest()[:12],
        }
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelError(f"cannot read the bundle {escape_controls(str(path))}: {why}") from None


def fingerprint(path: str) -> tuple:
    """What changes when a deployment tool replaces the bundle at ``path``."""
    real = os.path.realpath(path)
    out: list = [real]
    for name in ("", "manifest.json"):
        try:
            st = os.stat(os.path.join(real, name) if name else real)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class Loaded:
    """A model in the run: the task model, what names it, its frames in flight (prepared for it,
    not yet finished) and its recent results per label (what a rollback compares)."""

    def __init__(self, model, info: dict, path: str) -> None:
        self.model, self.info, self.path = model, info, str(path)
        self.label = f"{info['name']}@{info['version']}#{info['hash']}"
        self.in_flight = 0
        self.recent: collections.deque = collections.deque()  # (t, [(label, score), ...])
        self.closed = False

    def describe(self) -> dict:
        return {**self.info, "label": self.label, "path": self.path}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.model.close()


def agreement(task: str, ref: list, got: list) -> dict:
    """How a candidate's results ``got`` agree with the model in use's ``ref`` on the same frames
    (per-frame :class:`~edgert.runtime.results.Result` lists), by the task's own ``compare``
    hook: top-1 agreement (classifiers), box F1 and per label the ratio of the candidate's
    objects to the current model's (detectors)."""
    return task_spec(task).compare(ref, got)


def refuse_to_compare(current, candidate) -> str | None:
    """Why a candidate cannot be checked against the model in use (another task, no class in
    common), or None."""
    if candidate.task != current.task:
        return f"a {candidate.task} model cannot be checked against a {current.task} one"
    no_measure = task_spec(current.task).no_measure()
    if no_measure is not None:
        return no_measure
    mine, theirs = getattr(current, "labels", None), getattr(candidate, "labels", None)
    if mine and theirs and not set(mine) & set(theirs):
        return "the candidate's classes are none of the model in use's: nothing to compare"
    return None


def judge(task: str, measures: dict, o: SwapOptions, what: str) -> str | None:
    """Why :func:`agreement`'s ``measures`` on ``what`` (live frames, requests' images) refuse a
    candidate under the bounds of ``o`` (the task's ``judge`` hook), or None."""
    return task_spec(task).judge(measures, o, what)


def json_body(body: bytes):
    """A request's JSON body (none: ``{}``), or None when it is not JSON."""
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return None


class Watched:
    """A bundle path SIGHUP and ``--watch-model`` read again, and its fingerprint when it was
    last read (what a poll compares with)."""

    def __init__(self, path: str, seen: tuple | None = None) -> None:
        self.path = str(path)
        self.seen = seen if seen is not None else fingerprint(self.path)


class SwapQueue:
    """Requests for a new model and the one thread that carries them out, in order: what
    ``edgert camera``'s :class:`~edgert.apps.swap.camera.ModelSlot` (and each of its
    secondaries' :class:`~edgert.apps.swap.secondary.SecondarySwap`) and ``edgert serve``'s
    :class:`~edgert.apps.swap.serve.ServeSwapper` share. A subclass calls :meth:`_queue` in its
    ``__init__`` and gives ``_swap(path, why, force)`` and ``_describe()``; it may give
    ``_watched()`` (the paths SIGHUP and ``--watch-model`` read), ``_tick()`` (every wake, at least
    four times a second), ``_kept()`` and ``_who()`` (what a refusal says)."""

    COMMAND = "edgert"  # the command a sentence tells to start with --model-endpoint
    SUPERSEDE = False  # True: of the requests waiting, only the latest is done (the rest said)
    COUNTS = ("swaps", "refusals")  # report()'s counters, in its order
    STOP_S = 60.0  # how long close() waits for a swap under way

    def _queue(self, options: SwapOptions, roots, say, post_event, name: str) -> None:
        self.o, self.say, self.post_event = options, say, post_event
        self.lock = threading.Lock()
        self.requests: collections.deque = collections.deque()
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.swaps = self.refusals = 0
        self.last: dict | None = None  # the last swap, refusal or rollback
        self.busy = False
        self.roots = sorted({os.path.realpath(r) for r in roots})
        self._numbers = itertools.count(1)
        self._hangups = 0  # SIGHUPs since catch_hangups, even before this queue ran, count
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def request(self, path: str, why: str, force: bool = False) -> int:
        """Queue a swap to ``path`` (done in order, each fully; with ``SUPERSEDE``, a request
        still waiting when a later one comes is dropped); its number (never repeated)."""
        n = next(self._numbers)
        self.requests.append((str(path), why, force))
        self.wake.set()
        return n

    def _next(self) -> tuple:
        """The request to do now (with ``SUPERSEDE``: the latest; those before it are said to
        be superseded, never loaded)."""
        item = self.requests.popleft()
        while self.SUPERSEDE and self.requests:
            later = self.requests.popleft()
            self._superseded(item[0], item[1], later[0])
            item = later
        return item

    def _superseded(self, path: str, why: str, by: str) -> None:
        """A request dropped because a later one came before it was done."""

    def allowed(self, path: str) -> bool:
        """``path`` is inside a folder ``--allow-models`` names, links and ``..`` resolved."""
        return _inside(os.path.realpath(path), self.roots)

    def candidate(self, path: str, why: str) -> tuple[str, dict]:
        """(where ``path`` leads now, what names the model there), read once in the swap thread:
        what is loaded is that folder, never the path again (a link that moves meanwhile moves
        nothing). A POST's bundle is checked against ``--allow-models`` here, at the swap, and
        its files where their links lead. ModelError (one sentence) otherwise. A watched path
        named is taken as read (``--watch-model`` compares with it from now on)."""
        for w in self._watched():
            if w.path == path:
                w.seen = fingerprint(path)
        real = os.path.realpath(path)
        posted = why == POSTED
        if posted and not self.allowed(real):
            raise ModelError(
                f"it now leads to {escape_controls(real)}, outside the folders --allow-models "
                f"names ({', '.join(self.roots)})"
            )
        return real, model_info(real, self.roots if posted else None)

    def load_candidate(self, real: str, info: dict, why: str, count: int = 1) -> list:
        """``count`` task models of the bundle at ``real`` (one per instance), and a ModelError
        when that bundle is no longer the one :meth:`candidate` named (it was replaced while it
        loaded: the label would name another model than the one that runs). On any failure the
        models loaded are closed and the error raised."""
        models: list = []
        try:
            for _ in range(count):
                models.append(self.load(real))
            if model_info(real, self.roots if why == POSTED else None) != info:
                raise ModelError(
                    "the bundle changed while it was loaded; it is read again next time"
                )
        except BaseException:
            for m in models:
                m.close()
            raise
        return models

    def http_post(self, body: bytes) -> tuple[int, bytes, str]:
        """``POST /model`` with ``{"bundle": PATH, "force": false}``."""
        return self.post(json_body(body))

    def post(self, data, **answer) -> tuple[int, bytes, str]:
        """``POST /model``'s body ``data`` (parsed; None: not JSON) answered (``answer``: more
        fields of the 202's body)."""
        if not self.o.endpoint:
            return self.off()
        try:
            path = data["bundle"]
            force = data.get("force", False)
            if not isinstance(path, str) or not path:
                raise TypeError
        except (KeyError, TypeError, AttributeError):
            return json_answer(
                400, {"error": 'the body is JSON naming a bundle: {"bundle": "/path"}'}
            )
        if not isinstance(force, bool):  # "false" is a non-empty string: never a yes
            return json_answer(400, {"error": '"force" is true or false (a JSON boolean)'})
        refused = self.refused(path)
        if refused is not None:
            return refused
        n = self.request(path, POSTED, force)
        return json_answer(202, {"accepted": True, **answer, "request": n, "bundle": path})

    def off(self) -> tuple[int, bytes, str]:
        """The answer while ``--model-endpoint`` was not given."""
        off = f"POST /model is off: start {self.COMMAND} with --model-endpoint"
        return json_answer(404, {"error": off})

    def refused(self, path: str) -> tuple[int, bytes, str] | None:
        """The answer to a POSTed bundle path the endpoint does not take (a NUL character,
        outside the folders --allow-models names), or None."""
        if "\x00" in path:
            return json_answer(400, {"error": "the bundle path holds a NUL character"})
        if not self.allowed(path):
            where = ", ".join(self.roots)
            return json_answer(
                403, {"error": f"{path} is not in a folder --allow-models names ({where})"}
            )
        return None

    def http_get(self, _body: bytes = b"") -> tuple[int, bytes, str]:
        return json_answer(200, self.report())

    def report(self) -> dict:
        """What runs (:meth:`_describe`), the counters, whether a swap is under way or waiting,
        and the last swap, refusal or rollback: ``GET /model`` and the summary."""
        with self.lock:
            return {
                **self._describe(),
                **{k: getattr(self, k) for k in self.COUNTS},
                "busy": self.busy or bool(self.requests),
                "last": self.last,
            }

    def _describe(self) -> dict:
        raise NotImplementedError

    def start(self):
        self.thread.start()
        return self

    def close(self) -> None:
        """The swap thread stopped (a swap under way waited for, at most ``STOP_S``)."""
        self.stopped.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(self.STOP_S)

    def _run(self) -> None:
        last_poll = time.monotonic()
        while not self.stopped.is_set():
            self.wake.wait(0.25)
            self.wake.clear()
            if self.stopped.is_set():
                break
            if _hangups[0] != self._hangups:  # SIGHUP (one re-read for a burst of them)
                self._hangups = _hangups[0]
                self.reread("SIGHUP")
            if self.o.watch and time.monotonic() - last_poll >= self.o.poll_s:
                last_poll = time.monotonic()
                self._poll()
            self._tick()
            while self.requests and not self.stopped.is_set():
                path, why, force = self._next()
                self.busy = True
                try:
                    self._swap(path, why, force)
                except Exception as exc:  # noqa: BLE001 - a swap never ends the run
                    self._refuse(path, why, f"{type(exc).__name__}: {exc}", time.monotonic())
                finally:
                    self.busy = False

    def counters(self) -> list:
        """(metric, value, help) of the swap counters, for /metrics."""
        return [
            ("edgert_model_swaps_total", self.swaps, "Models swapped in while running"),
            (
                "edgert_model_swap_refusals_total",
                self.refusals,
                "Swaps refused (load, task, check)",
            ),
        ]

    def _watched(self) -> list:
        """The bundle paths SIGHUP and ``--watch-model`` read again (:class:`Watched`)."""
        return []

    def reread(self, why: str) -> None:
        """SIGHUP: the bundle path(s) read again (one that did not change: nothing to swap)."""
        for w in self._watched():
            self.request(w.path, why)

    def _poll(self) -> None:
        """``--watch-model``: a watched path that changed since it was read is asked for."""
        for w in self._watched():
            seen = fingerprint(w.path)
            if seen != w.seen:
                w.seen = seen
                self.request(w.path, "--watch-model")

    def _tick(self) -> None:
        pass

    def _swap(self, path: str, why: str, force: bool) -> None:
        raise NotImplementedError

    def _who(self) -> tuple[dict, str]:
        """Whose swap an event and a sentence name: (the event's fields, the sentence's start)."""
        return {}, "model"

    def _kept(self) -> tuple[dict, str]:
        """What a refusal leaves serving: (the event's fields, the sentence's end)."""
        return {}, "the model in use goes on"

    def _event(self, kind: str, path: str, why: str, **more) -> Event:
        """An event of ``kind`` about the swap of ``path`` (whose, the bundle, who asked)."""
        fields = {**self._who()[0], "bundle": str(path), "requested_by": why, **more}
        return Event(kind, fields=fields)

    def _refuse(self, path, why, reason: str, t0: float, check: dict | None = None) -> None:
        with self.lock:
            self.refusals += 1
        fields, goes_on = self._kept()
        event = self._event("model_swap_refused", path, why, reason=reason, **fields)
        event.fields["s"] = round(time.monotonic() - t0, 3)
        if check:
            event.fields["check"] = check
        self._said(event, f"{self._who()[1]}: {path} refused ({reason}); {goes_on}")

    def _said(self, event: Event, sentence: str) -> None:
        record = event.to_record()
        self.last = {**record, "time": round(time.time(), 3)}
        self.say(escape_controls(sentence))  # a path's CR/LF cannot forge a line
        self.post_event(record)


def first_run_fails(model, image, what: str) -> str | None:
    """Why a candidate task model fails when run once on ``image`` (``what``: "a live frame",
    "an image"), or None: a broken model fails here, and a TensorRT plan is built here, not in
    the batches that serve (it runs beside them, on its own engine)."""
    from edgert.runtime.errors import EdgertError

    try:
        model(image)
    except EdgertError as exc:
        return f"the candidate fails on {what}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a broken model, whatever it raises
        return f"the candidate fails on {what}: {type(exc).__name__}: {exc}"
    return None


def give_back_memory() -> None:
    """glibc keeps what a closed model freed in its arenas, so the process would stay as large as
    with two models; ``malloc_trim(0)`` returns it to the system (MobileNetV2 on ONNX Runtime:
    173 MB after a swap without it, 119 MB with it, one model 135 MB). Nothing elsewhere."""
    import ctypes

    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)
