"""edgert camera: frames from a camera or stream through a model, results out, numbers for every stage."""

from __future__ import annotations

import argparse
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
    from edgert.apps.camera import features
    from edgert.apps.camera.options import ModelOptions, RunOptions
    from edgert.apps.camera.sinks import SinkOptions, StoreOptions
    from edgert.apps.camera.sources import SourceOptions

    p = sub.add_parser(
        "camera",
        help="camera inference app (e.g. edgert camera m.edgert --source csi://0 --output http://127.0.0.1:8080)",
        description="Run a model on frames from a camera, stream, video or images, with bounded latency "
        "(drop-oldest queues), per-stage timings, power and several outputs.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    p.set_defaults(func=run)


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
    from edgert.runtime.errors import OutputError, SourceError

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
    from edgert.apps.camera.app import run_camera
    from edgert.apps.camera.summary import print_summary, problems

    summary = run_camera(config(args), say=(lambda s: None) if args.json else print)
    if args.json:
        print(json_text.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    lines, code = problems(summary)
    for line in lines:
        print(f"edgert camera: error: {line}", file=sys.stderr)
    return code
