"""edgert camera: frames from a camera or stream through a model, results out, numbers for every stage."""

from __future__ import annotations

import argparse
import shlex
import sys
import textwrap

from edgert.runtime import json_text
from edgert.runtime.tasks import TASK_SPECS

EPILOG = """several sources: one engine; the frames of all streams are batched into one inference (up to
--batch, default one per stream within the model's largest batch), each stream with its own
capture thread and drop-oldest queue; a slow or dead stream is waited for at most
--batch-timeout-ms per batch, and a stream that ends or fails is reported while the rest go on.

exit codes: 0: every stream delivered frames and every output was written; 1: a source delivered
no frame (a camera that never answered, or still connecting at the end), a stream was lost and
did not come back, or images could not be read, while the rest ran (--reconnect forever: a stream
still trying is not an error); 2: an output failed, a bad option or input, or every stream
failed; 130/143: stopped by Ctrl-C/SIGTERM.

examples:
  edgert camera mobilenet_v2.edgert --source synthetic:// --output http://127.0.0.1:8080 --duration 30
  edgert camera det.edgert --source v4l2:///dev/video0 --width 1280 --height 720 --codec mjpeg --task detect
  edgert camera det.edgert --source rtsp://cam1/live --source rtsp://cam2/live --source clip.mp4 \\
      --output http://127.0.0.1:8080 --output file://out.mp4 --mosaic
"""


def epilog() -> str:
    """The forms of sources and outputs, made from their tables, then :data:`EPILOG`."""
    from edgert.apps.camera import sinks, sources

    said = [
        ("sources (several allowed, mixed): ", sources.forms()),
        ("outputs (several allowed): ", sinks.forms()),
    ]
    tables = [
        textwrap.fill(title + "; ".join(rows) + ".", 100, break_on_hyphens=False)
        for title, rows in said
    ]
    return "\n\n".join(tables) + " The summary ends with where every file went.\n\n" + EPILOG


def add_parser(sub) -> None:
    p = sub.add_parser(
        "camera",
        help="camera inference app (e.g. edgert camera m.edgert --source csi://0 --output http://127.0.0.1:8080)",
        description="Run a model on frames from a camera, stream, video or images, with bounded latency "
        "(drop-oldest queues), per-stage timings, power and several outputs.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p) -> None:
    """The command's flags (the command line's, and a --config file's)."""
    from edgert.apps.camera import features
    from edgert.apps.camera.options import ModelOptions, RunOptions
    from edgert.apps.camera.sinks import SinkOptions, StoreOptions
    from edgert.apps.camera.sources import SourceOptions

    ModelOptions.add_arguments(p, [t.name for t in TASK_SPECS.values() if t.camera])
    p.add_argument(
        "--source",
        action="append",
        metavar="URI",
        help="a camera, stream or file; repeat for several streams (default: synthetic://); "
        "${EDGERT_NAME} is replaced by that environment variable (keep passwords out of argv)",
    )
    for options in (SinkOptions, StoreOptions, RunOptions):
        options.add_arguments(p)
    features.add_arguments(p)  # each camera feature's own section (features/: the table)
    SourceOptions.add_arguments(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="the run's flags (MODEL, --source, --line, ...) from FILE, as on a command line ('#' "
        "starts a comment); SIGHUP re-reads it and applies what changed while the camera runs "
        "(--watch-config: whenever it changes)",
    )


class _FileParser(argparse.ArgumentParser):
    """The camera's flags read from a --config file: a mistake is an error, not an exit."""

    def error(self, message):
        from edgert.apps.camera.reload import ConfigRefused

        raise ConfigRefused(message)


def load_config(text: str):
    """(CameraConfig, version) of a configuration's text: here ``edgert camera``'s own flags,
    read as a shell would split them (the seam a site file's loader takes over). A mistake is
    one sentence (an EdgertError)."""
    from edgert.apps.camera.features.reload import flags_version
    from edgert.apps.camera.reload import ConfigRefused

    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise ConfigRefused(f"the configuration cannot be split into flags: {exc}") from None
    args = _file_parser().parse_args(tokens)
    if args.config or args.watch_config or args.config_endpoint:
        raise ConfigRefused(
            "--config, --watch-config and --config-endpoint go on the command line, not in the "
            "configuration"
        )
    return config(args), flags_version(text)


def _file_parser() -> argparse.ArgumentParser:
    p = _FileParser(prog="edgert camera --config", add_help=False)
    add_arguments(p)
    return p


def _with_file(args):
    """(CameraConfig, version) of ``--config FILE``; the command line gives only what the file
    cannot (--watch-config, --config-endpoint, --json)."""
    from edgert.runtime.errors import EdgertError

    given = [
        k
        for k, v in vars(_file_parser().parse_args([])).items()
        if k not in ("config", "watch_config", "config_endpoint", "json")
        and getattr(args, k, v) != v
    ]
    if given:
        flag = "MODEL" if given[0] == "model" else "--" + given[0].replace("_", "-")
        raise EdgertError(
            f"with --config {args.config} the run's flags are in that file: give {flag} there, "
            "not on the command line"
        )
    try:
        with open(args.config, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise EdgertError(f"--config {args.config} cannot be read: {exc}") from None
    return load_config(text)


def config(args):
    """The run's configuration from the parsed flags: each component reads its own group (each
    camera feature its section); ``--jsonl``, ``--events`` and ``--mqtt`` become sinks of the
    table (``jsonl://FILE``, ``events://FILE``, the broker's URI)."""
    from edgert.apps.camera import features
    from edgert.apps.camera.options import CameraConfig, ModelOptions, RunOptions
    from edgert.apps.camera.sinks import (
        SinkOptions,
        from_flag,
        short_flags,
        with_folder_flags,
        with_store,
    )
    from edgert.apps.camera.sources import SourceOptions
    from edgert.apps.uris import expand
    from edgert.runtime.errors import EdgertError, OutputError, SourceError

    try:  # ${EDGERT_...}: credentials from the environment, not the command line
        sources = [expand(s, "--source") for s in args.source or ["synthetic://"]]
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    try:
        sinks = [expand(s, "--output") for s in args.output]
        for flag in short_flags():
            value = getattr(args, flag[2:].replace("-", "_"))
            if value is not None:  # the short forms of sinks in the table
                sinks.append(from_flag(flag, expand(value, flag)))
        sinks = with_folder_flags(with_store(sinks, args.store), args)
    except ValueError as exc:
        raise OutputError(str(exc)) from None
    if args.model is None:
        raise EdgertError("give MODEL (a bundle, .onnx or .engine file), or --config FILE")
    return CameraConfig(
        model=ModelOptions.from_args(args),
        sources=sources,
        sinks=sinks,
        source_options=SourceOptions.from_args(args),
        sink_options=SinkOptions.from_args(args),
        run=RunOptions.from_args(args),
        **features.config_sections(args, CameraConfig),
    )


def run(args) -> int:
    import dataclasses

    from edgert.apps.camera import features
    from edgert.apps.camera.app import run_camera
    from edgert.apps.camera.summary import print_summary, problems

    cfg, version = _with_file(args) if args.config else (config(args), "command-line")
    cfg.more["reload"] = dataclasses.replace(
        features.Reload.from_args(args), loader=load_config, version=version
    )
    summary = run_camera(cfg, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json_text.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    lines, code = problems(summary)
    for line in lines:
        print(f"edgert camera: error: {line}", file=sys.stderr)
    return code
