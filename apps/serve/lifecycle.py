"""``edgert serve``'s life: the bundles loaded, Triton started with their models, served until
a stop is asked, then stopped so that nothing is left behind (processes, shared memory,
folders). PyTriton's private parts are reached only through :mod:`.pytriton_compat`."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from edgert.apps import processes
from edgert.apps.uris import is_loopback, warn_if_open
from edgert.runtime.errors import OutputError

from . import pytriton_compat as compat
from .config import (
    ServeConfig,
    check_ports,
    few_malloc_arenas,
    model_names,
    python_library_path,
    require_pytriton,
)
from .models import bindings

log = logging.getLogger(__name__)


def serve(cfg: ServeConfig, say=print) -> None:
    """Load the bundles, start Triton, block until interrupted (Ctrl-C, SIGTERM), stop it."""
    require_pytriton()
    from edgert.apps.swap.core import catch_hangups

    check_options(cfg)
    names = model_names(cfg.bundles)
    python_library_path()
    few_malloc_arenas()
    serving = Serving(cfg, say)
    hangup = catch_hangups()  # SIGHUP re-reads every bundle path, whatever the phase
    try:
        serving.load(names)
        serving.run(hangup)
    finally:
        serving.close()


def check_options(cfg: ServeConfig) -> None:
    """The options that do not go together, and the ports, before anything loads."""
    if cfg.swap.endpoint and cfg.edgert_metrics_port is None:
        raise OutputError(
            "--model-endpoint answers POST /model on edgert's own port: give "
            "--edgert-metrics-port PORT as well"
        )
    if cfg.swap.endpoint and not is_loopback(cfg.host):
        raise OutputError(
            f"--model-endpoint lets whoever reaches --host {cfg.host} replace the models: it "
            "needs a loopback --host (127.0.0.1); swap with SIGHUP or --watch-model instead"
        )
    ports = {
        "--http-port": cfg.http_port,
        "--grpc-port": cfg.grpc_port,
        "--metrics-port": cfg.metrics_port,
    }
    if cfg.edgert_metrics_port is not None:
        ports["--edgert-metrics-port"] = cfg.edgert_metrics_port
    check_ports(cfg.host, ports)
    warn_if_open("edgert serve --host", cfg.host, cfg.http_port)


class Serving:
    """One ``edgert serve``: what it loaded (closed at the end), the bindings Triton is given,
    the models served by name, edgert's telemetry and the swapper."""

    def __init__(self, cfg: ServeConfig, say) -> None:
        self.cfg, self.say = cfg, say
        self.loaded: list = []  # everything to close at the end
        self.bindings: list = []
        self.served: dict = {}  # name -> swap.Served
        self.telemetry = self.swapper = None
        self.counted = lambda name: None

    def load(self, names: list[str]) -> None:
        from edgert.apps.swap.core import Loaded, fingerprint, model_info
        from edgert.apps.swap.serve import Recent, Served
        from edgert.runtime.tasks import load_task_model

        cfg = self.cfg
        if cfg.edgert_metrics_port is not None:  # /live and /ready from the start
            from edgert.apps.telemetry.serving import ServeTelemetry

            self.telemetry = ServeTelemetry(cfg, self.say)
            self.telemetry.start_power()
            self.counted = self.telemetry.counter
        for path, name in zip(cfg.bundles, names):
            # what names it and what --watch-model compares with, read before it loads (as the
            # camera does): a bundle replaced while it loads is then a change, not one missed
            info, seen = model_info(path), fingerprint(path)
            probe = processes.uninterrupted(
                load_task_model, path, backend=cfg.backend, precision=cfg.precision
            )
            self.loaded.append(probe)
            image_models = [probe] + [
                load_task_model(path, backend=cfg.backend, precision=cfg.precision)
                for _ in range(cfg.instances - 1)
            ]
            self.loaded.extend(image_models[1:])
            self.say(f"{name}: {probe.backend_reason}")
            if self.telemetry is not None:
                self.telemetry.loaded(name, probe)
            first = Loaded(probe, info, str(path))
            # the last request images: --swap-check's frames to compare on, else the one a
            # candidate is first run on
            recent = Recent(cfg.swap.check_frames if cfg.swap.check else 1)
            served = Served(name, str(path), first, image_models, seen=seen, recent=recent)
            self.served[name] = served
            self.bindings.extend(
                bindings(name, image_models, cfg, self.counted, first.label, served.recent)
            )

    def triton_config(self, log_file: Path):
        from pytriton.triton import TritonConfig

        cfg = self.cfg
        return TritonConfig(
            http_address=cfg.host,
            http_port=cfg.http_port,
            grpc_address=cfg.host,
            grpc_port=cfg.grpc_port,
            metrics_address=cfg.host,
            metrics_port=cfg.metrics_port,
            exit_timeout_secs=3,
            log_verbose=0,
            log_file=log_file,
        )

    def run(self, hangup) -> None:
        """Triton started with the bindings, served until a stop is asked, stopped cleanly."""
        from pytriton.triton import Triton

        cfg = self.cfg
        log_file = Path(tempfile.gettempdir()) / f"edgert-serve-{os.getpid()}.log"
        self.say(f"Triton's own log: {log_file}")
        # a stop asked for while Triton starts waits until it has (PyTriton's own start would
        # stop it abruptly, leaving its stubs behind), then takes the clean path below
        pending, restore = processes.defer_signals()
        try:
            with Triton(config=self.triton_config(log_file)) as triton:
                for b in self.bindings:
                    triton.bind(strict=True, **b)
                if self.telemetry is not None:
                    self.telemetry.phase = "starting Triton"
                triton.run()
                models = [b["model_name"] for b in self.bindings]
                self.bindings.clear()  # PyTriton holds them; a swap's freed model is held by none
                started = processes.descendants(compat.server_pid(triton))
                interrupted = False
                try:
                    restore()  # signals act again, inside the try that stops cleanly
                    if pending:
                        raise KeyboardInterrupt
                    self.serve_until_stopped(triton, models)
                except KeyboardInterrupt:
                    interrupted = True
                finally:
                    if self.telemetry is not None:  # not ready from here on: balancers drain
                        self.telemetry.phase = "stopping"
                    hangup()
                    if self.swapper is not None:
                        self.swapper.close()  # a swap under way ends; Triton's stop unloads it
                    failure = stop_triton(triton, cfg, models, started, log_file, self.say)
        finally:
            restore()
        if not interrupted:
            raise OutputError(f"Triton exited on its own ({failure}); its log: {log_file}")
        if failure:
            raise OutputError(
                f"Triton did not stop cleanly within {cfg.drain_s:g} s ({failure}); "
                f"requests still in flight were cut; its log: {log_file}"
            )
        raise KeyboardInterrupt  # commands/serve.py: "stopped", exit code 0

    def serve_until_stopped(self, triton, models: list[str]) -> None:
        """Ready once every model answers; the swapper started; then served until Triton ends
        or a stop is asked (KeyboardInterrupt)."""
        from edgert.apps.swap.serve import ServeSwapper
        from edgert.runtime.tasks import load_task_model

        cfg = self.cfg
        wait_until_models_answer(cfg, models, self.telemetry)
        for s in self.served.values():  # PyTriton's model of each name, version 1
            s.entries = [
                (m, None)
                for m in compat.served_models(triton)
                if m.model_name in (s.name, f"{s.name}_image")
            ]
        self.swapper = ServeSwapper(
            triton,
            self.served,
            cfg.swap,
            lambda path: load_task_model(path, backend=cfg.backend, precision=cfg.precision),
            lambda name, models, label, recent: bindings(
                name, models, cfg, self.counted, label, recent
            ),
            cfg.instances,
            local(cfg.host, cfg.grpc_port),
            cfg.drain_s,
            self.say,
        ).start()
        if self.telemetry is not None:
            self.telemetry.swapper, self.swapper.on_swap = self.swapper, self.telemetry.loaded
        self.say(
            f"ready: http://{cfg.host}:{cfg.http_port} grpc {cfg.host}:{cfg.grpc_port} "
            f"metrics http://{cfg.host}:{cfg.metrics_port}/metrics (models: {', '.join(models)})"
        )
        # not triton.serve(): it swallows KeyboardInterrupt and stops Triton at once
        while triton.is_alive():
            processes.raise_if_stop_asked()  # an interrupt some code swallowed
            time.sleep(0.5)

    def close(self) -> None:
        if self.telemetry is not None:
            self.telemetry.close()
        for m in self.loaded + [m for s in self.served.values() for m in s.models]:
            m.close()  # closing twice is nothing


def stop_triton(triton, cfg: ServeConfig, models, started, log_file: Path, say) -> str | None:
    """Stop accepting, let the requests in flight finish (at most cfg.drain_s), stop Triton, and
    leave nothing behind: unloading a model makes Triton answer new requests for it with 404,
    finish the queued and running ones, then finalise its Python backend stubs (which closes
    their tensor stores: shared memory, resource trackers). Triton's own SIGINT path instead
    spends exit_timeout_secs on open keep-alive connections first and then exits at once, with
    the stubs still running. Returns None after a clean stop, else what went wrong."""
    import tritonclient.http as httpclient

    if threading.current_thread() is threading.main_thread():  # a second Ctrl-C or SIGTERM
        for sig in (signal.SIGINT, signal.SIGTERM):  # must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
    pid = compat.server_pid(triton) if compat.server_alive(triton) else None
    helpers = sorted(set(started) | set(processes.descendants(pid) if pid else []))
    # Triton writes each model PyTriton loads to a temporary folder (the stubs' first argument,
    # FOLDER/1/model.py) and removes it only on a clean unload
    folders = {
        Path(a.decode()).parents[1]
        for p in helpers
        for a in processes.cmdline(p).split(b"\0")[1:2]
        if a.endswith(b"/model.py")
    }
    if pid:
        say(f"stopping: waiting up to {cfg.drain_s:g} s for requests in flight")
        url = local(cfg.host, cfg.http_port)
        headers = {"triton-access-token": triton.get_access_token()}  # model-repository API
        try:
            client = httpclient.InferenceServerClient(url, network_timeout=10)
            for model in models:
                client.unload_model(model, headers=headers)  # returns at once
            client.close()
        except Exception as exc:  # noqa: BLE001 - Triton is dying anyway: the clean-up below
            log.debug("unloading the models failed: %s", exc)
        deadline = time.monotonic() + cfg.drain_s
        while (
            processes.descendants(pid) and time.monotonic() < deadline
        ):  # the stubs are gone = unloaded
            time.sleep(0.1)
    triton.stop()  # SIGINT, waits for tritonserver; cleans PyTriton's workspace
    killed = [p for p in helpers if processes.alive(p)]
    trackers = [p for p in killed if b"resource_tracker" in processes.cmdline(p)]
    for p in killed:  # stubs of a failed stop and their tensor store processes; not the
        if p not in trackers:  # resource trackers: once those are alone they unlink the
            processes.kill(p)  # stubs' shared memory themselves, and exit
    deadline = time.monotonic() + 2
    while any(processes.alive(p) for p in trackers) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in trackers:
        processes.kill(p)
    prefix = compat.shm_prefix(triton)
    for p in Path("/dev/shm").glob(f"{prefix}*"):  # the Python backend's own regions
        p.unlink(missing_ok=True)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    code = compat.server_exit_code(triton)  # negative: killed by that signal (-11: crashed)
    if code == 0 and not killed:
        log_file.unlink(missing_ok=True)
        return None
    return f"exit code {code}" + (f", {len(killed)} of its processes killed" if killed else "")


def local(host: str, port: int) -> str:
    """Where this process reaches its own Triton's ``port`` bound to ``host``."""
    from edgert.apps.telemetry.serving import local_address

    return f"{local_address(host)}:{port}"


def wait_until_models_answer(cfg: ServeConfig, models: list[str], telemetry=None) -> None:
    """Triton says ready before PyTriton's models answer: wait until each model's own
    /v2/models/NAME/ready does (then edgert's /ready turns 200 and "ready:" is printed)."""
    from edgert.apps.telemetry.serving import models_not_ready

    if telemetry is not None:
        telemetry.models = models
        telemetry.phase = "waiting for the models to answer"
    deadline = time.monotonic() + cfg.ready_timeout_s
    waiting = models
    while waiting:
        waiting = models_not_ready(cfg.host, cfg.http_port, waiting)
        if waiting and time.monotonic() > deadline:
            raise OutputError(
                f"Triton started but {', '.join(waiting)} did not answer ready "
                f"within {cfg.ready_timeout_s:g} s"
            )
        if waiting:
            time.sleep(0.1)
    if telemetry is not None:
        telemetry.phase = "serving"
