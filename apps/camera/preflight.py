"""Pre-flight checks of a camera run, before anything opens: a sink that cannot be one, a file
the run would both read and write (or two sinks write), two listeners on one port, a model
endpoint off loopback. Each is one sentence (:class:`OutputError`)."""

from __future__ import annotations

import os
from pathlib import Path

from edgert.runtime.errors import OutputError

from .options import CameraConfig
from .sinks import SinkOptions, check_sink, sink_paths
from .sources import source_files

__all__ = ["check_outputs_apart", "files_apart"]


def check_outputs_apart(cfg: CameraConfig, uris: list[str] | None = None) -> None:
    """OutputError when a sink cannot be one (checked before anything opens), when a file the
    run would write is a file it reads (the same file: inode, symlinks followed) or another
    sink's file (``--output file://clip.mp4`` on ``clip.mp4`` would destroy the source), or when
    --metrics and a web viewer would listen on one port. Every scheme of both tables is covered:
    the files come from the tables' own functions."""
    uris = cfg.sink_uris() if uris is None else uris
    read = [u for u in cfg.sources if isinstance(u, str)]  # FrameSource objects read no file here
    files_apart(read, uris, len(cfg.sources), cfg.sink_options, cfg.stream_sinks)
    ports_apart(cfg, uris, cfg.stream_sinks)


def files_apart(
    sources: list[str], uris: list[str], streams: int, options: SinkOptions, own=()
) -> None:
    """``own``: (stream, URI) of the cameras' own outputs, each written for its stream alone."""
    for uri in [*uris, *(u for _, u in own)]:
        check_sink(uri, options)
    reads = [f for uri in sources for f in source_files(uri)]
    writes = [w for uri in uris for w in sink_paths(uri, streams, options.mosaic)]
    writes += [(f"--stream-output {i}:{u}", p) for i, u in own for _, p in sink_paths(u)]
    for k, (what, path) in enumerate(writes):
        for src in reads:
            if same_file(path, src):
                raise OutputError(
                    f"{what} would write {path}, which is the source {src}: it would destroy what "
                    "is read; pick another output file"
                )
        for other_what, other in writes[:k]:
            if same_file(path, other):
                raise OutputError(
                    f"{what} and {other_what} would both write {path}: give each its own file"
                )


def ports_apart(cfg: CameraConfig, uris: list[str], own=()) -> None:
    """OutputError when two of the run's listeners (--metrics, web viewers, RTSP re-streams)
    would take one port (the viewer's port serves the probes and /metrics itself, so --metrics
    may simply be left out), or when --model-endpoint would answer on an address other than
    loopback (whoever reaches it could replace the model)."""
    from edgert.apps.telemetry.http import parse_address
    from edgert.apps.uris import is_loopback, redact

    from .sinks import listener

    listeners = [("--metrics", *parse_address(cfg.metrics), True)] if cfg.metrics else []
    listeners += [x for x in map(listener, uris) if x is not None]
    for i, uri in own:  # a camera's own re-stream listens on a port of its own
        x = listener(uri)
        if x is not None:
            listeners.append((f"--stream-output {i}:{redact(uri)}", *x[1:]))
    seen: dict = {}
    for what, _, port, probes in listeners:
        if port and port in seen:
            raise OutputError(
                f"{seen[port]} and {what} would both listen on port {port}: give each its own"
                + (
                    " (or leave --metrics out: the web viewer's port serves /metrics, /live and "
                    "/ready too)"
                    if seen[port] == "--metrics" and probes
                    else ""
                )
            )
        seen[port] = what
    answering = [(w, h) for w, h, _, probes in listeners if probes]
    if cfg.swap.endpoint and any(not is_loopback(h) for _, h in answering):
        what, host = next((w, h) for w, h in answering if not is_loopback(h))
        raise OutputError(
            f"--model-endpoint lets whoever reaches {what} on {host} replace the model: it needs "
            "--metrics and the web viewer on a loopback address (127.0.0.1); swap with SIGHUP or "
            "--watch-model instead"
        )


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): the same path once links are followed
        return os.path.realpath(a) == os.path.realpath(b)
