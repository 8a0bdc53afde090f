"""``edgert serve``: bundles behind a real NVIDIA Triton Inference Server (PyTriton's
``tritonserver``): KServe v2 HTTP/gRPC, dynamic batching, Prometheus metrics.

Per bundle two models:

- ``NAME``: the bundle's own tensors (names, dtypes, shapes without the batch axis, max batch from
  the bundle), dynamic batching, inference by :class:`edgert.runtime.Engine`.
- ``NAME_image``: one encoded image per request (BYTES, JPEG/PNG) -> the bundle's preprocessing ->
  inference (requests of any image size batched together after preprocessing) -> the task's
  decoded result as JSON (BYTES ``result``), plus the raw outputs.

Every instance has its own engine (``--instances N``): Triton runs instances in parallel, and an
engine serialises its own calls.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import socket
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgert.apps import processes
from edgert.apps.swapping import SwapOptions
from edgert.apps.uris import is_loopback, warn_if_open
from edgert.runtime.errors import MissingDependency, OutputError
from edgert.runtime.results import records

log = logging.getLogger(__name__)

PIP_LINE = "pip install 'edgert[serve]' (its own environment: PyTriton needs numpy < 2)"


@dataclass
class ServeConfig:
    bundles: list[str]
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    max_batch: int | None = None
    max_queue_delay_us: int = 500
    instances: int = 1
    backend: str = "auto"
    precision: str = "auto"
    drain_s: float = 5.0  # SIGTERM/Ctrl-C: longest wait for in-flight requests (then unload)
    edgert_metrics_port: int | None = None  # edgert's /metrics, /live and /ready (beside Triton's)
    sysfs_root: str | None = None  # power sensors (tests recreate a board)
    ready_timeout_s: float = 120.0  # how long the models may take to answer after Triton starts
    swap: SwapOptions = field(default_factory=SwapOptions)  # a new bundle while serving


def require_pytriton():
    try:
        import pytriton.triton  # noqa: F401
    except ImportError as exc:
        raise MissingDependency(
            f"edgert serve needs PyTriton, which is not installed: {PIP_LINE}"
        ) from exc
    if int(np.__version__.split(".")[0]) >= 2:
        raise MissingDependency(
            f"PyTriton's Python backend needs numpy < 2 (this is {np.__version__}): {PIP_LINE}"
        )


def check_ports(host: str, ports: dict[str, int]) -> None:
    """One sentence for a port in use, a port given twice or a host that is not this machine's,
    before Triton starts (it would only log and exit, or hang). The probe sets SO_REUSEADDR, as
    Triton's own listeners do, so connections of a server just stopped (TIME-WAIT) do not count
    as the port being in use."""
    seen: dict[int, str] = {}
    for flag, port in ports.items():
        if port in seen:
            raise OutputError(f"{flag} and {seen[port]} are both {port}: give each its own port")
        seen[port] = flag
    for flag, port in ports.items():
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except socket.gaierror as exc:
                raise OutputError(f"--host {host} is not an address ({exc.strerror})") from None
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise OutputError(
                        f"--host {host} is not an address of this machine; use 127.0.0.1, 0.0.0.0 "
                        "(every interface) or one of its own addresses"
                    ) from None
                raise OutputError(
                    f"port {port} on {host} is not free ({exc.strerror}); pick another with {flag}"
                ) from None


def model_names(paths: list[str]) -> list[str]:
    """The Triton model name of each bundle (its manifest name; a file's stem); BundleError when
    two would be served under one name (Triton would fail only after loading both)."""
    from edgert.runtime.bundle import Bundle, is_bundle
    from edgert.runtime.errors import BundleError

    names = [Bundle(p).manifest.name if is_bundle(p) else Path(p).stem for p in paths]
    for i, name in enumerate(names):
        if name in names[:i]:
            first = paths[names.index(name)]
            raise BundleError(
                f"{first} and {paths[i]} are both named {name!r}; Triton serves one model per name "
                "(export one with --name)"
            )
    return names


def _python_library_path() -> None:
    """Triton's Python backend stub links libpython: point it at this interpreter's own (a pyenv
    or conda interpreter is not the system one, and the wrong libpython fails at model load)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and Path(libdir).is_dir():
        current = os.environ.get("LD_LIBRARY_PATH", "")
        if libdir not in current.split(":"):
            os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{current}" if current else libdir


def _tensor(spec, batched: bool):
    from pytriton.model_config import Tensor

    shape = tuple(spec.shape[1:] if batched else spec.shape)
    return Tensor(name=spec.name, dtype=np.dtype(spec.dtype).type, shape=shape)


class _TensorModel:
    """NAME: the bundle's tensors in, its outputs out."""

    def __init__(self, engine, counted=None) -> None:
        self.engine = engine
        self.counted = counted or (lambda n: None)

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        out = self.engine.infer(inputs)
        self.counted(len(next(iter(inputs.values()))) if inputs else 1)
        return out


def _per_request(fn):
    """For models without batching PyTriton hands over a list of requests (each a mapping of
    input name to array, batch axis included): answer each one."""

    def infer(requests):
        return [fn(**dict(r.items())) for r in requests]

    return infer


class _ImageModel:
    """NAME_image: encoded images -> preprocessing -> one batch -> results as JSON."""

    def __init__(
        self, model, batch_images: bool = True, counted=None, label: str = "", recent=None
    ) -> None:
        self.model = model  # an edgert.runtime.tasks.TaskModel
        self.counted = counted or (lambda n: None)
        self.label = label  # name@version#hash: in every result
        self.recent = recent  # serve_swap.Recent: images and results a --swap-check compares on
        # a fixed-batch model (or one of several networks) takes one image per inference
        self.batch_images = batch_images and model.batched

    def __call__(self, image: np.ndarray) -> dict[str, np.ndarray]:
        from edgert.runtime.errors import EdgertError
        from edgert.runtime.images import decode_image

        frames, failed = [], {}
        for i, blob in enumerate(image.reshape(len(image), -1)[:, 0]):
            try:
                frames.append(decode_image(bytes(blob), "the request's image"))
            except EdgertError as exc:
                failed[i] = str(exc)
                frames.append(None)
        results: list = [None] * len(frames)
        raw: dict[str, np.ndarray] = {}
        no_raw: set[int] = set()  # said in their JSON: {"raw_outputs": false}
        ok = [i for i, f in enumerate(frames) if f is not None]
        if self.batch_images:
            groups: dict[tuple, list] = {}  # one inference per input size (an any-size model)
            for i in ok:
                try:
                    tensor, transform = self.model.preprocess(frames[i])
                except EdgertError as exc:  # this request's image only
                    failed[i] = str(exc)
                    continue
                groups.setdefault(tensor.shape, []).append((i, tensor, transform))
            for members in groups.values():
                idx = [i for i, _, _ in members]
                outputs = self.model.infer(np.stack([t for _, t, _ in members]))
                decoded = self.model.postprocess(outputs, [tr for _, _, tr in members])
                for name, value in outputs.items():
                    if name not in raw:
                        raw[name] = np.zeros((len(frames), *value.shape[1:]), value.dtype)
                    if raw[name].shape[1:] == value.shape[1:]:
                        raw[name][idx] = value
                    else:  # one batch holds one shape: these requests' raw outputs stay zeros
                        no_raw.update(idx)
                for i, r in zip(idx, decoded):
                    results[i] = r
        else:  # several networks, or a fixed batch of 1: one image per inference, no raw outputs
            for i in ok:
                try:
                    results[i] = self.model(frames[i])
                except EdgertError as exc:
                    failed[i] = str(exc)
        self.counted(len(frames) - len(failed))
        answered = [i for i in ok if i not in failed]
        if self.recent is not None and answered:
            self.recent.add(frames[answered[-1]], results[answered[-1]])
        text = [
            json.dumps(
                {"error": failed[i]}
                if i in failed
                else {
                    "results": records(results[i]),
                    "model": self.label,
                    **({"raw_outputs": False} if i in no_raw else {}),
                }
            )
            for i in range(len(frames))
        ]
        return {"result": np.array([[t.encode()] for t in text], dtype=np.object_), **raw}


def _bindings(
    name: str, image_models: list, cfg: ServeConfig, counted, label: str, recent=None
) -> list:
    """PyTriton's ``bind`` arguments of one bundle's two models (NAME: its tensors, where it is one
    engine; NAME_image), one inference function per instance (``image_models``: one task model
    each). ``label``: the model's ``name@version#hash``, in every image result; ``recent``: where
    the image model keeps what a ``--swap-check`` compares on."""
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

    bindings = []
    probe = image_models[0]
    if probe.engine is not None:  # one engine: its tensors are a model of their own
        engines = [m.engine for m in image_models]
        specs = engines[0]
        dynamic = bool(specs.inputs) and specs.inputs[0].shape[0] < 0
        recorded = specs.max_batch or 8
        max_batch = min(cfg.max_batch or recorded, recorded) if dynamic else 0
        tensor_config = ModelConfig(
            batching=dynamic,
            max_batch_size=max_batch,
            batcher=DynamicBatcher(max_queue_delay_microseconds=cfg.max_queue_delay_us),
        )
        bindings.append(
            dict(
                model_name=name,
                infer_func=[
                    batch(_TensorModel(e, counted(name)))
                    if dynamic
                    else _per_request(_TensorModel(e, counted(name)))
                    for e in engines
                ],
                inputs=[_tensor(s, dynamic) for s in specs.inputs],
                outputs=[_tensor(s, dynamic) for s in specs.outputs],
                config=tensor_config,
            )
        )
        raw_outputs = [_tensor(s, True) for s in specs.outputs] if dynamic else []
        image_batch = max_batch or cfg.max_batch or 8
    else:
        dynamic, raw_outputs, image_batch = False, [], cfg.max_batch or 8
    bindings.append(
        dict(
            model_name=f"{name}_image",
            infer_func=[
                batch(_ImageModel(m, dynamic, counted(f"{name}_image"), label, recent))
                for m in image_models
            ],
            inputs=[Tensor(name="image", dtype=np.bytes_, shape=(1,))],
            outputs=[Tensor(name="result", dtype=np.bytes_, shape=(1,)), *raw_outputs],
            config=ModelConfig(
                max_batch_size=image_batch,
                batcher=DynamicBatcher(max_queue_delay_microseconds=cfg.max_queue_delay_us),
            ),
        )
    )
    return bindings


def _stop(triton, cfg: ServeConfig, models, started, log_file: Path, say) -> str | None:
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
    server = triton._triton_server  # PyTriton 0.7: pytriton.server.triton_server.TritonServer
    running = server._tritonserver_running_cmd  # an sh.RunningCommand
    pid = running.pid if server.is_alive() else None
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
        url = _local(cfg.host, cfg.http_port)
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
    prefix = triton._python_backend_config["shm-region-prefix-name"]
    for p in Path("/dev/shm").glob(f"{prefix}*"):  # the Python backend's own regions
        p.unlink(missing_ok=True)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    code = running.process.exit_code  # negative: killed by that signal (-11: it crashed)
    if code == 0 and not killed:
        log_file.unlink(missing_ok=True)
        return None
    return f"exit code {code}" + (f", {len(killed)} of its processes killed" if killed else "")


def serve(cfg: ServeConfig, say=print) -> None:
    """Load the bundles, start Triton, block until interrupted (Ctrl-C, SIGTERM), stop it."""
    require_pytriton()
    from pytriton.triton import Triton, TritonConfig

    from edgert.apps.serve_swap import Recent, Served, ServeSwapper
    from edgert.apps.swapping import Loaded, catch_hangups, fingerprint, model_info
    from edgert.runtime.tasks import load_task_model

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
    names = model_names(cfg.bundles)
    _python_library_path()
    _few_malloc_arenas()
    loaded = []  # everything to close at the end
    bindings = []
    served: dict[str, Served] = {}
    telemetry = swapper = None
    hangup = catch_hangups()  # SIGHUP re-reads every bundle path, whatever the phase
    try:
        if cfg.edgert_metrics_port is not None:  # /live and /ready from the start
            from edgert.apps.telemetry.serving import ServeTelemetry

            telemetry = ServeTelemetry(cfg, say)
            telemetry.start_power()
        counted = telemetry.counter if telemetry is not None else (lambda name: None)
        for path, name in zip(cfg.bundles, names):
            # what names it and what --watch-model compares with, read before it loads (as the
            # camera does): a bundle replaced while it loads is then a change, not one missed
            info, seen = model_info(path), fingerprint(path)
            probe = processes.uninterrupted(
                load_task_model, path, backend=cfg.backend, precision=cfg.precision
            )
            loaded.append(probe)
            image_models = [probe] + [
                load_task_model(path, backend=cfg.backend, precision=cfg.precision)
                for _ in range(cfg.instances - 1)
            ]
            loaded.extend(image_models[1:])
            say(f"{name}: {probe.backend_reason}")
            if telemetry is not None:
                telemetry.loaded(name, probe)
            first = Loaded(probe, info, str(path))
            # the last request images: --swap-check's frames to compare on, else the one a
            # candidate is first run on
            recent = Recent(cfg.swap.check_frames if cfg.swap.check else 1)
            served[name] = Served(name, str(path), first, image_models, seen=seen, recent=recent)
            bindings.extend(
                _bindings(name, image_models, cfg, counted, first.label, served[name].recent)
            )
        log_file = Path(tempfile.gettempdir()) / f"edgert-serve-{os.getpid()}.log"
        say(f"Triton's own log: {log_file}")
        triton_config = TritonConfig(
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
        # a stop asked for while Triton starts waits until it has (PyTriton's own start would
        # stop it abruptly, leaving its stubs behind), then takes the clean path below
        pending, restore = processes.defer_signals()
        try:
            with Triton(config=triton_config) as triton:
                for b in bindings:
                    triton.bind(strict=True, **b)
                if telemetry is not None:
                    telemetry.phase = "starting Triton"
                triton.run()
                models = [b["model_name"] for b in bindings]
                bindings.clear()  # PyTriton holds them; a swap's freed model is held by none
                started = processes.descendants(triton._triton_server._tritonserver_running_cmd.pid)
                interrupted = False
                try:
                    restore()  # signals act again, inside the try that stops cleanly
                    if pending:
                        raise KeyboardInterrupt
                    _wait_until_models_answer(cfg, models, telemetry)
                    for s in served.values():  # PyTriton's model of each name, version 1
                        s.entries = [
                            (m, None)
                            for m in triton._model_manager.models
                            if m.model_name in (s.name, f"{s.name}_image")
                        ]
                    swapper = ServeSwapper(
                        triton,
                        served,
                        cfg.swap,
                        lambda path: load_task_model(
                            path, backend=cfg.backend, precision=cfg.precision
                        ),
                        lambda name, models, label, recent: _bindings(
                            name, models, cfg, counted, label, recent
                        ),
                        cfg.instances,
                        _local(cfg.host, cfg.grpc_port),
                        cfg.drain_s,
                        say,
                    ).start()
                    if telemetry is not None:
                        telemetry.swapper, swapper.on_swap = swapper, telemetry.loaded
                    say(
                        f"ready: http://{cfg.host}:{cfg.http_port} grpc {cfg.host}:{cfg.grpc_port} "
                        f"metrics http://{cfg.host}:{cfg.metrics_port}/metrics (models: {', '.join(models)})"
                    )
                    # not triton.serve(): it swallows KeyboardInterrupt and stops Triton at once
                    while triton.is_alive():
                        processes.raise_if_stop_asked()  # an interrupt some code swallowed
                        time.sleep(0.5)
                except KeyboardInterrupt:
                    interrupted = True
                finally:
                    if telemetry is not None:  # not ready from here on: balancers drain first
                        telemetry.phase = "stopping"
                    hangup()
                    if swapper is not None:
                        swapper.close()  # a swap under way ends; Triton's stop unloads it
                    failure = _stop(triton, cfg, models, started, log_file, say)
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
    finally:
        if telemetry is not None:
            telemetry.close()
        for m in loaded + [m for s in served.values() for m in s.models]:
            m.close()  # closing twice is nothing


def _few_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives threads their own malloc arenas (up to 8 a core) and keeps what is freed in
    them; PyTriton starts new handler threads for each model version, so a server that swaps
    models grew about 8 MB a swap up to a plateau ~140 MB higher (benchmarks/serve_swap.py,
    MobileNetV2, 30 swaps under 4 clients: 192 -> 329 MB; with two arenas flat, 184 -> 191 MB
    over 14). Two arenas for this process, unless ``MALLOC_ARENA_MAX`` says otherwise; nothing
    where the C library is not glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-8, arenas)  # M_ARENA_MAX, <malloc.h>


def _local(host: str, port: int) -> str:
    """Where this process reaches its own Triton's ``port`` bound to ``host``."""
    from edgert.apps.telemetry.serving import local_address

    return f"{local_address(host)}:{port}"


def _wait_until_models_answer(cfg: ServeConfig, models: list[str], telemetry=None) -> None:
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
