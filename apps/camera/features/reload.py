"""Live reload (``--config FILE``, ``--watch-config``, SIGHUP, ``--config-endpoint``): a new
configuration applied to the running camera, each camera on its own (:mod:`..reload`); GET
/config shows the running one (credentials redacted) and its version, POST /config takes a new
one (off unless asked for, loopback clients only unless ``--config-endpoint any``, its body
bounded by the port's 64 KiB)."""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

from edgert.apps.telemetry.http import json_answer, request_peer
from edgert.apps.uris import is_loopback
from edgert.runtime.errors import OutputError
from edgert.runtime.events import kind_of

from .base import Feature, Run

POLL_S = 0.2  # how often --watch-config looks at the file (its size, time and hash)


@dataclass(frozen=True)
class ReloadOptions:
    """Where the configuration comes from and what may change it while it runs."""

    path: str | None = None  # --config FILE: re-read on SIGHUP and, with watch, when it changes
    watch: bool = False  # --watch-config
    endpoint: str | None = None  # --config-endpoint: "loopback" (default) or "any"
    loader: Callable | None = None  # loader(text) -> (CameraConfig, version[, names])
    version: str = ""  # the version of the configuration the run starts with
    names: tuple = ()  # the cameras' names (default: their positions)


def file_state(path: str) -> tuple:
    """What a change of the file changes: its size, modification time and contents' hash
    (an editor that keeps the time, a copy of the same size, are still seen)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        st = os.stat(path)
    except OSError:
        return (None,)
    return (st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest())


class Reload(Feature):
    """The run's :class:`~..reload.Reloader` and its triggers (a thread for the file and
    SIGHUP; the routes)."""

    name = "reload"
    section = "reload"
    help_rank = 65
    needs = ("tracking", "gate", "swap")
    after = ("tracking", "gate", "swap")  # the counters, gates and model slot it changes
    events = ("config_applied", "config_refused")

    reloader: Any = None
    thread: threading.Thread | None = None

    @staticmethod
    def add_arguments(parser) -> None:
        g = parser.add_argument_group("live reload (with --config FILE)")
        g.add_argument(
            "--watch-config",
            action="store_true",
            help="apply the --config file whenever it changes (SIGHUP always re-reads it): "
            "cameras added and removed, lines, zones, masks and the gate changed, the other "
            "cameras untouched",
        )
        g.add_argument(
            "--config-endpoint",
            nargs="?",
            const="loopback",
            choices=["loopback", "any"],
            help="POST /config (the file's text) on the --metrics / web viewer port applies it "
            "(off unless given; from this machine only unless 'any'); GET /config shows the "
            "running configuration either way",
        )

    @staticmethod
    def from_args(args) -> ReloadOptions:
        return ReloadOptions(  # a site file's namespace has none of them: the command line's
            getattr(args, "config", None),
            getattr(args, "watch_config", False),
            getattr(args, "config_endpoint", None),
        )

    @staticmethod
    def options(run: Run) -> ReloadOptions:
        return run.cfg.section("reload") or ReloadOptions()

    def check(self, run: Run) -> None:
        o = self.options(run)
        if o.watch and not o.path:
            raise OutputError("--watch-config watches the file --config names: give --config FILE")
        if o.endpoint and not (run.cfg.metrics or run.web):
            raise OutputError(
                "--config-endpoint answers on the --metrics port or the web viewer's: give one "
                "of them"
            )

    def attach(self, run: Run) -> None:
        from ..reload import Reloader

        o = self.options(run)
        if o.loader is None:
            return
        self.reloader = Reloader(run, o.loader, o.version, o.names or None)
        if o.version:  # every event says the configuration it was made under (the site's hash:
            run.handler.marks["config"] = o.version  # a file and its command line alike)
        if o.path:
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._watch, args=(o,), daemon=True)
            self.thread.name = "config-watch"
            self.thread.start()

    def _watch(self, o: ReloadOptions) -> None:
        """SIGHUP (one re-read for a burst) and, with --watch-config, the file's changes."""
        from edgert.apps.swap import core

        # SIGHUPs since catch_hangups (the model slot's, at the start) count: one while the
        # camera started asks for the file read again
        hangups, seen = 0, file_state(o.path)
        while not self.stop.wait(POLL_S):
            why = None
            if core._hangups[0] != hangups:
                hangups, why = core._hangups[0], "SIGHUP"
            if o.watch:
                now = file_state(o.path)
                if now != seen and now != (None,):
                    seen, why = now, why or "--watch-config"
            if why is not None:
                self.reload_file(o.path, why)

    def reload_file(self, path: str, why: str) -> dict:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            return self.reloader._refuse(None, why, f"{path} cannot be read: {exc}", 0.0)
        return self.reloader.apply_text(text, why)

    def close(self, run: Run) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join(5.0)

    def routes(self, run: Run) -> dict:
        return {
            ("GET", "/config"): lambda body=b"": self.http_get(),
            ("POST", "/config"): lambda body: self.http_post(run, body),
        }

    def http_get(self):
        r = self.reloader
        if r is None:
            return json_answer(404, {"error": "this run has no configuration to show"})
        return json_answer(200, {**r.report(), "config": r.shown()})

    def http_post(self, run: Run, body: bytes):
        o, r = self.options(run), self.reloader
        if not o.endpoint or r is None:
            return json_answer(
                404, {"error": "POST /config is off: start edgert camera with --config-endpoint"}
            )
        peer = request_peer()
        if o.endpoint != "any" and (peer is None or not is_loopback(peer)):
            return json_answer(
                403,
                {
                    "error": "POST /config is taken from this machine only (start with "
                    "--config-endpoint any to take it from others)"
                },
            )
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return json_answer(400, {"error": "the body is the configuration's text, in UTF-8"})
        record = r.apply_text(text, "POST /config")
        return json_answer(200 if kind_of(record) == "config_applied" else 422, record)

    def report(self, run: Run, summary: dict) -> None:
        if self.reloader is not None and (self.reloader.applied or self.reloader.refused):
            summary["config"] = self.reloader.report()

    @staticmethod
    def summary_lines(s: dict) -> list:
        c = s.get("config")
        if not c:
            return []
        return [
            f"configuration {c['version']}: {c['applied']} applied, {c['refused']} refused "
            "while it ran"
        ]


def flags_version(text: str) -> str:
    """A configuration's version: the first 12 hex digits of its text's SHA-256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
