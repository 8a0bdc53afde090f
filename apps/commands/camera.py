"""edgert camera: frames from a camera or stream through a model, results out, numbers for every stage."""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap

from edgert.runtime import json_text

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
    from edgert.apps.config import flags

    p = sub.add_parser(
        "camera",
        help="camera inference app (e.g. edgert camera m.edgert --source csi://0 --output http://127.0.0.1:8080)",
        description="Run a model on frames from a camera, stream, video or images, with bounded latency "
        "(drop-oldest queues), per-stage timings, power and several outputs. The flags and a site "
        "file (--config) are two ways of writing the same configuration (--print-config shows "
        "the file of a command line; `edgert config check` checks a file).",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags.add_arguments(p)  # each component's own section (apps/config/flags.py: the table)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    f = p.add_argument_group("site file")
    f.add_argument(
        "--config",
        metavar="FILE",
        help="run the site in FILE (YAML: the model, the cameras and every section; see `edgert "
        "config schema`); it is the whole configuration: MODEL and flags that change the "
        "configuration are refused beside it (--json, --print-config, --watch-config, "
        "--config-endpoint and -v/-q/--debug are not)",
    )
    f.add_argument(
        "--print-config",
        action="store_true",
        help="print the site file of this command line (or of --config FILE) and exit",
    )
    p.set_defaults(func=run)


def config(args):
    """The run's configuration from the parsed flags (:func:`edgert.apps.config.flags.camera_config`)."""
    from edgert.apps.config import flags

    return flags.camera_config(args)


def site(args):
    """The site of the command line, or of --config FILE (with no other configuration flag)."""
    from edgert.apps.config import flags, load_site, site_from_args
    from edgert.runtime.errors import EdgertError

    if args.config is None:
        if args.model is None:
            raise EdgertError("give a MODEL (a bundle, .onnx or .engine) or --config FILE")
        return site_from_args(args)
    plain = flags.defaults()
    given = [
        f.option
        for found in flags.sections().values()
        for f in found
        if getattr(args, f.action.dest) != getattr(plain, f.action.dest)
    ]
    if given:
        raise EdgertError(
            f"{', '.join(given)} with --config: the file is the whole configuration; "
            "give it there (edgert camera ... --print-config writes a command line as a file)"
        )
    return load_site(args.config)


def _loader(path):
    """The reload's loader: a site file's text (the --config file again, or POST /config's
    body) -> (CameraConfig, version, camera names); ConfigError names every problem."""
    from edgert.apps.config import load_site_text

    def load(text: str):
        site = load_site_text(text, name=str(path) if path else "POST /config")
        return site.config, site.version, list(site.names)

    return load


def run(args) -> int:
    import dataclasses

    from edgert.apps.camera import features
    from edgert.apps.camera.app import run_camera
    from edgert.apps.camera.summary import print_summary, problems
    from edgert.apps.config import ConfigError
    from edgert.runtime.malloc import keep_freed_memory

    try:
        chosen = site(args)
    except ConfigError as exc:
        for line in exc.lines():
            print(f"edgert camera: error: {line}", file=sys.stderr)
        return exc.exit_code
    if args.print_config:
        sys.stdout.write(chosen.yaml())
        return 0
    cfg = chosen.config
    cfg.more["reload"] = dataclasses.replace(
        features.Reload.from_args(args),
        loader=_loader(args.config),
        version=chosen.version,
        names=tuple(chosen.names),
    )
    # a frame's arrays reuse the memory the last frame's gave back (runtime/malloc.py)
    logging.getLogger(__name__).debug("malloc: %s", keep_freed_memory())
    summary = run_camera(cfg, say=(lambda s: None) if args.json else print)
    if args.json:
        print(json_text.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
    lines, code = problems(summary)
    for line in lines:
        print(f"edgert camera: error: {line}", file=sys.stderr)
    return code
