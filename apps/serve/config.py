"""What ``edgert serve`` is asked (:class:`ServeConfig`) and what it checks and sets before Triton
starts: PyTriton's presence and version, the ports, the models' names, the process's libpython
path and malloc arenas."""

from __future__ import annotations

import errno
import os
import socket
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgert.apps.swap.options import SwapOptions
from edgert.runtime.errors import MissingDependency, OutputError

from . import pytriton_compat

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
    from importlib.metadata import PackageNotFoundError, version

    try:
        why = pytriton_compat.unsupported(version("nvidia-pytriton"))
    except PackageNotFoundError:  # importable without its metadata (a source tree): unchecked
        why = None
    if why:
        raise MissingDependency(f"{why}: {PIP_LINE}")
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


def python_library_path() -> None:
    """Triton's Python backend stub links libpython: point it at this interpreter's own (a pyenv
    or conda interpreter is not the system one, and the wrong libpython fails at model load)."""
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and Path(libdir).is_dir():
        current = os.environ.get("LD_LIBRARY_PATH", "")
        if libdir not in current.split(":"):
            os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{current}" if current else libdir


def few_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives threads their own malloc arenas (up to 8 a core) and keeps what is freed in
    them; PyTriton starts new handler threads for each model version, so a server that swaps
    models grew about 8 MB a swap up to a plateau ~140 MB higher (benchmarks/serve_swap.py,
    MobileNetV2, 30 swaps under 4 clients: 192 -> 329 MB; with two arenas flat, 184 -> 191 MB
    over 14). Two arenas for this process, unless ``MALLOC_ARENA_MAX`` says otherwise; nothing
    where the C library is not glibc."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    from edgert.runtime.malloc import M_ARENA_MAX, glibc_mallopt

    mallopt = glibc_mallopt()
    if mallopt is not None:
        mallopt(M_ARENA_MAX, arenas)
