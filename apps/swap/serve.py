"""A new bundle for a running ``edgert serve`` through Triton's model control, checked, with no
request dropped.

    request   SIGHUP (every bundle path given read again: a symlink or folder that deployment
              tools replace atomically), a change of one (``--watch-model``), or ``POST /model``
              ``{"bundle": PATH}`` on ``--edgert-metrics-port`` (``--model-endpoint``; only
              bundles under ``--allow-models`` folders, by default the served bundles' own). The
              bundle's name says which served model it replaces.
    load      the candidate is read, loaded (one task model per ``--instances``) and run once on
              the last image a request sent (its plan built, on TensorRT) while Triton goes on
              serving the model in use; one that cannot be loaded is refused in one sentence
    check     ``--swap-check``: the candidate runs on the images of the last requests (at most
              20, one every 0.1 s at most, kept as they came) and is compared with what the model
              in use answered, with the INT8 gate's measures (top-1 agreement, box F1, each
              label's rate); promoted within the bounds, else refused (``"force": true`` promotes)
    promote   NAME and NAME_image are loaded as version N+1 through Triton's model control, over
              gRPC (Triton's HTTP load holds the HTTP worker thread that also serves inference:
              requests waited the whole load, measured 1.7-2.2 s; triton-inference-server/server
              #8117, #8958); Triton loads the new version beside the old one, which serves until
              the new one is ready, then unloads it once its requests in flight are answered
    free      when the old version's Python backend stubs have exited, its PyTriton model is
              cleaned (its threads, sockets and workspace folder) and its task models closed

Every image result names the model that made it (``"model": "name@version#hash"``); GET /model
says what runs, ``edgert_model_info`` and the swap counters are on edgert's /metrics.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgert.apps import processes
from edgert.apps.serve import pytriton_compat as compat
from edgert.apps.uris import escape_controls
from edgert.runtime.errors import EdgertError
from edgert.runtime.events import Event

from .core import (
    Loaded,
    SwapQueue,
    agreement,
    first_run_fails,
    give_back_memory,
    judge,
    refuse_to_compare,
)
from .options import SwapOptions


class Recent:
    """The images a served model answered lately, with its results (what ``--swap-check``
    compares on): at most one every ``GAP_S``, the last ``size`` kept."""

    GAP_S = 0.1

    def __init__(self, size: int = 20) -> None:
        self.items: collections.deque = collections.deque(maxlen=size)
        self.lock = threading.Lock()
        self.at = 0.0
        self.added = threading.Event()

    def add(self, image: np.ndarray, results) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.at < self.GAP_S:
                return
            self.at = now
            self.items.append((image, results))
        self.added.set()

    def snapshot(self) -> list:
        with self.lock:
            return list(self.items)


@dataclass
class Served:
    """One bundle as Triton serves it now: NAME (its tensors, where it is one engine) and
    NAME_image, both at ``version``."""

    name: str
    path: str  # the path given: SIGHUP and --watch-model read it again
    loaded: Loaded  # the first instance's task model, what names it
    models: list  # every instance's task model
    version: int = 1  # the highest Triton version its names were given
    # (PyTriton's Model, its own workspace folder or None) of each served name, at its version
    entries: list = field(default_factory=list)
    recent: Recent = field(default_factory=Recent)
    seen: tuple = ()  # the path's fingerprint before it was read: --watch-model compares
    # (a :class:`~.core.Watched`: ``path`` and ``seen``)


class ServeSwapper(SwapQueue):
    """The swap thread of ``edgert serve`` (see the module's text). ``make_bindings(name, models,
    label, recent)`` gives PyTriton's ``bind`` arguments of a bundle's models; ``load(path)`` one
    task model."""

    COMMAND = "edgert serve"

    def __init__(
        self,
        triton,
        served: dict,
        options: SwapOptions,
        load,
        make_bindings,
        instances: int,
        grpc_url: str,
        drain_s: float,
        say=lambda s: None,
    ) -> None:
        self.triton, self.served = triton, served
        self.load, self.make_bindings, self.instances = load, make_bindings, instances
        self.grpc_url, self.drain_s = grpc_url, drain_s
        self.on_swap = lambda name, model: None  # edgert's /metrics: the new build labels
        roots = options.allow or tuple(str(Path(s.path).parent) for s in served.values())
        self._queue(options, roots, say, lambda event: None, "serve-model-swap")

    # -- requests: SwapQueue's (request, allowed, POST and GET /model, report) ----------------
    def _watched(self) -> list:
        """Every bundle path given (SIGHUP reads them all again)."""
        return list(self.served.values())

    def _describe(self) -> dict:
        models = {
            name: {**s.loaded.describe(), "triton_version": s.version}
            for name, s in self.served.items()
        }
        return {"models": models}

    def infos(self) -> list:
        """(served name, model info, Triton version) of each bundle: ``edgert_model_info``."""
        with self.lock:
            return [(n, dict(s.loaded.info), s.version) for n, s in self.served.items()]

    # -- the thread ----------------------------------------------------------------------------
    def _swap(self, path: str, why: str, force: bool) -> None:
        t0 = time.monotonic()
        try:
            real, info = self.candidate(path, why)
            name = info["name"]  # its manifest's (a file's stem): as serve names its models
        except EdgertError as exc:
            return self._refuse(path, why, str(exc), t0)
        cur = self.served.get(name)
        if cur is None:
            serving = ", ".join(sorted(self.served))
            return self._refuse(
                path, why, f"its name is {name!r} and this server serves {serving}", t0
            )
        if info == cur.loaded.info:
            msg = f"model: {path} is the {name} in use ({why}); nothing to swap"
            return self.say(escape_controls(msg))
        try:
            models = self._instances(real, info, why)
        except _Refused as refused:
            return self._refuse(path, why, refused.why, t0)
        candidate = Loaded(models[0], info, path)
        try:
            problem = _fails_once(models[0], cur.recent)
            check = None
            if problem is None and self.o.check:
                problem, check = self._check(cur, candidate)
            if problem is not None and (check is None or not force):
                raise _Refused(problem, check)
            was, was_version = cur.loaded.label, cur.version
            version, old = self._promote(cur, candidate, models)
        except _Refused as refused:
            if not refused.keep:
                for m in models:
                    m.close()
            return self._refuse(path, why, refused.why, t0, refused.check)
        except BaseException:
            for m in models:
                m.close()
            raise
        fields = {
            "model": name,
            "from": was,
            "to": candidate.label,
            "triton_version": version,
            "bundle": path,
            "requested_by": why,
            "s": round(time.monotonic() - t0, 3),
            "forced": bool(force and problem),
            **({"check": check} if check is not None else {}),
        }
        self._announce(Event("model_swap", fields=fields), candidate)
        entries, task_models, recent = old
        with recent.lock:
            recent.items.clear()
        self._release(entries, task_models, f"{name} version {was_version}")
        return None

    def _instances(self, real: str, info: dict, why: str) -> list:
        """One task model of the candidate per instance (all closed and _Refused on a failure)."""
        try:
            return self.load_candidate(real, info, why, self.instances)
        except (EdgertError, OSError) as exc:
            raise _Refused(str(exc)) from exc

    def _announce(self, event: Event, candidate: Loaded) -> None:
        with self.lock:
            self.swaps += 1
        f = event.fields
        self.on_swap(f["model"], candidate.model)
        self._said(
            event,
            f"model: {f['model']} is now {candidate.label}, Triton version "
            f"{f['triton_version']} (was {f['from']}; {f['requested_by']})",
        )

    def _check(self, cur: Served, candidate: Loaded) -> tuple[str | None, dict]:
        """``--swap-check`` on the images of the last requests: (why it fails, the measures)."""
        differ = refuse_to_compare(cur.loaded.model, candidate.model)
        if differ:
            return differ, {}
        want = cur.recent.items.maxlen
        deadline = time.monotonic() + 30.0
        while len(cur.recent.snapshot()) < want and time.monotonic() < deadline:
            cur.recent.added.clear()
            came = cur.recent.added.wait(0.5)
            if self.stopped.is_set() or (not came and len(cur.recent.snapshot()) >= 5):
                break  # traffic is slow: what came will do
        samples = cur.recent.snapshot()
        if len(samples) < 5:
            return (
                f"only {len(samples)} images came in requests to {cur.name}_image within 30 s "
                "to check the candidate on"
            ), {}
        got = [candidate.model(image) for image, _ in samples]
        measures = agreement(candidate.model.task, [r for _, r in samples], got)
        return judge(candidate.model.task, measures, self.o, "requests' images"), measures

    def _promote(self, cur: Served, candidate: Loaded, models: list) -> tuple[int, list]:
        """NAME (and NAME_image) as version N+1 beside N; Triton switches when each is ready.
        (N+1, what served N: its entries, task models and recent images). When Triton refuses
        the second name after the first switched, the first goes back to the model in use (as
        version N+2) and the candidate's is freed: one model serves both names, or the swap is
        refused."""
        version = cur.version + 1
        recent = Recent(cur.recent.items.maxlen)
        bindings = self.make_bindings(cur.name, models, candidate.label, recent)
        entries: list = []
        try:
            for binding in bindings:
                entries.append(self._load_version(binding, version))
        except Exception as exc:
            why = f"Triton did not load it: {_first_line(exc)}"
            keep = False
            if entries:
                said, keep = self._restore(cur, entries, version + 1)
                why += said
            self._release(entries, [], f"{cur.name}'s candidate")
            raise _Refused(why, None, keep) from None
        with self.lock:
            old = (cur.entries, cur.models, cur.recent)
            cur.loaded, cur.models, cur.version = candidate, models, version
            cur.entries, cur.recent = entries, recent
        return version, old

    def _restore(self, cur: Served, switched: list, version: int) -> tuple[str, bool]:
        """The names that switched to a candidate Triton then refused for another name, served
        by the model in use again (as ``version``): (what happened, in words; whether the
        candidate's task models still serve and must stay open)."""
        again = {
            b["model_name"]: b
            for b in self.make_bindings(cur.name, cur.models, cur.loaded.label, cur.recent)
        }
        names = [m.model_name for m, _ in switched]
        try:
            restored = [self._load_version(again[n], version) for n in names]
        except Exception as exc:  # noqa: BLE001 - said, and the candidate keeps those names
            switched.clear()  # they serve; not freed
            return f"; {', '.join(names)} stay on the candidate ({_first_line(exc)})", True
        with self.lock:
            replaced = [e for e in cur.entries if e[0].model_name in names]
            cur.entries = [e for e in cur.entries if e[0].model_name not in names] + restored
            cur.version = version
        switched.extend(replaced)  # freed with the candidate's, once their stubs are gone
        return f"; {', '.join(names)} back on the model in use as version {version}", False

    def _load_version(self, binding: dict, version: int):
        """One served name at ``version``: PyTriton's Model on its own workspace folder, loaded
        over gRPC, then set up and registered (so that ``is_alive()`` asks it, once set up: the
        serving loop ends when one is not alive, and the stop cleans and unloads it)."""
        import tritonclient.grpc as grpcclient

        t = self.triton
        model, folder = compat.model_version(t, binding, version)
        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            client.load_model(
                model.model_name,
                headers={"triton-grpc-protocol-triton-access-token": t.get_access_token()},
                config=json.dumps(model.get_model_config()),
                files=model.get_proxy_model_files(),
            )
        except Exception:
            self._forget(model, folder)
            raise
        finally:
            client.close()
        model.setup()
        compat.register(t, model)
        return model, folder

    def _forget(self, model, folder: Path | None = None) -> None:
        compat.unregister(self.triton, model)
        model.clean()  # out of the registry first: a cleaned model is not alive
        compat.forget_functions(self.triton, model.infer_functions)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def _release(self, entries: list, task_models: list, what: str) -> None:
        """Free versions Triton no longer serves: once their stubs have exited (they answer the
        requests they hold first), their PyTriton models are cleaned (threads, sockets,
        workspace folder) and ``task_models`` closed, without failing a request."""
        if not entries:
            return
        server = compat.server_pid(self.triton)
        pairs = [(m.model_name, m.model_version) for m, _ in entries]
        t0 = time.monotonic()
        deadline = t0 + self.drain_s + 30.0
        while _stubs_of(server, pairs) and time.monotonic() < deadline:
            if self.stopped.wait(0.1):
                return  # stopping: Triton's stop unloads and cleans every version
        left = _stubs_of(server, pairs)
        for model, folder in entries:
            self._forget(model, folder)
        for m in task_models:
            m.close()
        give_back_memory()
        versions = ", ".join(f"{n} {v}" for n, v in pairs)
        self.say(
            f"model: {what} freed after {time.monotonic() - t0:.1f} s ({versions})"
            + (f"; {len(left)} of its Triton stubs still running" if left else "")
        )

    def _kept(self) -> tuple[dict, str]:
        return {}, "the models in use go on"


class _Refused(Exception):
    """A candidate refused: why, the check's measures (or None), and whether its task models
    still serve a name (Triton refused one name and would not take the model in use back)."""

    def __init__(self, why: str, check: dict | None = None, keep: bool = False) -> None:
        super().__init__(why)
        self.why, self.check, self.keep = why, check, keep


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _fails_once(model, recent: Recent) -> str | None:
    """Why the candidate fails on the last image a request sent (a gray frame before any came),
    or None: a broken model or plan fails here, not in a request."""
    items = recent.snapshot()
    image = items[-1][0] if items else np.full((240, 320, 3), 114, np.uint8)
    return first_run_fails(model, image, "an image")


def _stubs_of(server: int, pairs: list) -> list:
    """PIDs of Triton's Python backend stubs still running these (model, version) pairs (the
    server's children; argv: STUB FOLDER/VERSION/model.py ... INSTANCE DEFAULT, an instance
    named MODEL_GROUP_N)."""
    found = []
    for pid in processes.descendants(server):
        argv = [a for a in processes.cmdline(pid).split(b"\0") if a]
        if len(argv) < 4 or not argv[1].endswith(b"/model.py"):
            continue
        version = argv[1].rsplit(b"/", 2)[-2].decode("latin-1")
        instance = argv[-2].decode("latin-1")
        for name, v in pairs:
            if str(v) == version and re.fullmatch(rf"{re.escape(name)}_\d+_\d+", instance):
                found.append(pid)
                break
    return found
