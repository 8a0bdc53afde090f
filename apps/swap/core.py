"""What ``edgert camera`` and ``edgert serve`` share to take a new model while running: the
options (``--watch-model``, ``--model-endpoint``, ``--allow-models``, ``--swap-check``), what
names a model (:func:`model_info`: name, version, a hash of what runs), the shadow check's
measures (:func:`agreement`, :func:`judge`: those of the INT8 gate) and giving memory back after
a model is closed. The camera's swap is ``camera/swap.py``; Triton's is ``serve/swap.py``."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edgert.apps.telemetry.http import json_answer
from edgert.apps.uris import escape_controls
from edgert.runtime.bundle import MAX_MANIFEST_BYTES
from edgert.runtime.errors import ModelError
from edgert.runtime.regular import NotRegular, open_regular, read_regular
from edgert.runtime.tasks import task_spec

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


@dataclass(frozen=True)
class SwapOptions:
    """How a running camera takes a new model (see the module's text)."""

    watch: bool = False  # --watch-model: the bundle path polled for a change
    endpoint: bool = False  # --model-endpoint: POST /model
    allow: tuple = ()  # --allow-models: folders POST /model may name (default: the bundle's)
    check: bool = False  # --swap-check
    check_frames: int = 20
    min_agreement: float = 0.9  # classifiers: top-1 agreement
    min_box_f1: float = 0.8  # detectors: box F1
    rollback_s: float = 30.0  # 0: no watch after a swap
    rollback_below: float = 0.5
    poll_s: float = 2.0
    against: str | None = None  # --check-against: start on this bundle, ready once MODEL passed

    @staticmethod
    def add_arguments(
        parser,
        what: str = "the bundle path",
        port: str = "the --metrics / web viewer port",
        sample: str = "live frames",
        rollback: bool = True,
    ) -> None:
        g = parser.add_argument_group(f"model hot-swap (SIGHUP always re-reads {what})")
        g.add_argument(
            "--watch-model",
            action="store_true",
            help=f"swap to the bundle at {what} whenever it changes (polled every 2 s)",
        )
        g.add_argument(
            "--model-endpoint",
            action="store_true",
            help=f'POST /model {{"bundle": PATH}} on {port} swaps to that '
            "bundle (off unless given; GET /model says what runs)",
        )
        g.add_argument(
            "--allow-models",
            action="append",
            default=[],
            metavar="DIR",
            help="a folder whose bundles POST /model may name (repeatable; default: the "
            "running bundles' folders)",
        )
        g.add_argument(
            "--swap-check",
            action="store_true",
            help=f"run a candidate on {sample} beside the model in use and promote it only "
            "when they agree (top-1 agreement >= 0.9, box F1 >= 0.8)",
        )
        if not rollback:
            return
        g.add_argument(
            "--check-against",
            metavar="BUNDLE",
            help="a rollout's canary: start on BUNDLE (the model this one replaces), check the "
            "model against it on live frames as --swap-check does, and take it only when they "
            "agree; /ready says 503 until then, and stays 503 with the reason if it is refused "
            "(the run goes on with BUNDLE)",
        )
        g.add_argument(
            "--rollback-window",
            type=float,
            default=30.0,
            metavar="S",
            help="after a swap, watch each label's detection rate and confidence for S seconds "
            "(default 30; 0: off) and put the old model back if one collapses",
        )
        g.add_argument(
            "--rollback-below",
            type=float,
            default=0.5,
            metavar="F",
            help="a collapse: a label's rate or mean confidence under F times the old model's "
            "(default 0.5)",
        )

    @classmethod
    def from_args(cls, args) -> SwapOptions:
        window = getattr(args, "rollback_window", 0.0)  # edgert serve: no rollback watch
        below = getattr(args, "rollback_below", 0.5)
        if not 0 < below < 1 or window < 0:
            raise ModelError("--rollback-below is between 0 and 1, --rollback-window >= 0 s")
        return cls(
            watch=args.watch_model,
            endpoint=args.model_endpoint,
            allow=tuple(args.allow_models),
            check=args.swap_check or bool(getattr(args, "check_against", None)),
            rollback_s=window,
            rollback_below=below,
            against=getattr(args, "check_against", None),
        )


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


class SwapQueue:
    """Requests for a new model and the one thread that carries them out, in order: what
    ``edgert camera``'s :class:`~edgert.apps.camera.swap.ModelSlot` and ``edgert serve``'s
    :class:`~edgert.apps.serve.swap.ServeSwapper` share. A subclass calls :meth:`_queue` in its
    ``__init__`` and gives ``_swap(path, why, force)``, ``_refuse(path, why, reason, t0)``,
    ``report()``, and may give ``_poll()`` (``--watch-model``, every ``poll_s``) and ``_tick()``
    (every wake, at least four times a second)."""

    COMMAND = "edgert"  # the command a sentence tells to start with --model-endpoint
    SUPERSEDE = False  # True: of the requests waiting, only the latest is done (the rest said)

    def _queue(self, options: SwapOptions, roots, say, post_event, name: str) -> None:
        self.o, self.say, self.post_event = options, say, post_event
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
        its files where their links lead. ModelError (one sentence) otherwise."""
        real = os.path.realpath(path)
        posted = why == POSTED
        if posted and not self.allowed(real):
            raise ModelError(
                f"it now leads to {escape_controls(real)}, outside the folders --allow-models "
                f"names ({', '.join(self.roots)})"
            )
        return real, model_info(real, self.roots if posted else None)

    def unchanged(self, real: str, info: dict, why: str) -> None:
        """ModelError when the bundle at ``real`` is not the one :meth:`candidate` named (it was
        replaced while it loaded: the label would name another model than the one that runs)."""
        if model_info(real, self.roots if why == POSTED else None) != info:
            raise ModelError("the bundle changed while it was loaded; it is read again next time")

    def http_post(self, body: bytes, **answer) -> tuple[int, bytes, str]:
        """``POST /model`` with ``{"bundle": PATH, "force": false}`` (``answer``: more fields of
        the 202's body)."""
        if not self.o.endpoint:
            return self.off()
        try:
            data = json.loads(body or b"{}")
            path = data["bundle"]
            force = data.get("force", False)
            if not isinstance(path, str) or not path:
                raise TypeError
        except (ValueError, KeyError, TypeError, AttributeError):
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
        raise NotImplementedError

    def start(self):
        self.thread.start()
        return self

    def _stop_thread(self, timeout: float) -> None:
        self.stopped.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout)

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

    def reread(self, why: str) -> None:
        """SIGHUP: the bundle path(s) read again (one that did not change: nothing to swap)."""
        raise NotImplementedError

    def _poll(self) -> None:
        pass

    def _tick(self) -> None:
        pass

    def _swap(self, path: str, why: str, force: bool) -> None:
        raise NotImplementedError

    def _kept(self) -> tuple[dict, str]:
        """What a refusal leaves serving: (the event's fields, the sentence's end)."""
        return {}, "the model in use goes on"

    def _refuse(self, path, why, reason: str, t0: float, check: dict | None = None) -> None:
        with self.lock:  # the subclass's
            self.refusals += 1
        fields, goes_on = self._kept()
        event = {
            "event": "model_swap_refused",
            "bundle": str(path),
            "requested_by": why,
            "reason": reason,
            **fields,
            "s": round(time.monotonic() - t0, 3),
        }
        if check:
            event["check"] = check
        self._said(event, f"model: {path} refused ({reason}); {goes_on}")

    def _said(self, event: dict, sentence: str) -> None:
        self.last = {**event, "time": round(time.time(), 3)}
        self.say(escape_controls(sentence))  # a path's CR/LF cannot forge a line
        self.post_event(dict(event))


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
