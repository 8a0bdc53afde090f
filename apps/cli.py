"""The ``edgert`` command line: a thin layer over the library.

Each subcommand lives in ``apps/commands/<name>.py`` with ``add_parser(subparsers)`` and
``run(args) -> int``. Errors a user can cause are ``EdgertError``: printed as one sentence on stderr
with a non-zero exit code and no traceback (``--debug`` shows it).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
from importlib import metadata

from edgert.apps.argtypes import Parser
from edgert.runtime.errors import EdgertError

COMMANDS = (
    "export",
    "build",
    "run",
    "camera",
    "bench",
    "power",
    "cache",
    "export-triton",
    "serve",
    "info",
    "demo",
)

EPILOG = """examples:
  edgert export zoo:mobilenet_v2 -o mobilenet_v2.edgert   PyTorch -> checked ONNX bundle
  edgert export net.py:build --weights w.pth --input-shape 1x3x224x224 --dynamic-batch
  edgert build mobilenet_v2.edgert --precision int8        calibrated, gated INT8 (+ TensorRT plan)
  edgert run mobilenet_v2.edgert photo.jpg --top-k 3       classify images with a bundle
  edgert cache list mobilenet_v2.edgert                    TensorRT plans cached in a bundle
  edgert info                                              what this machine offers
  edgert demo                                              the built-in end-to-end demo
"""


def version() -> str:
    try:
        return metadata.version("edgert")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="edgert",
        description="Edge inference for NVIDIA Jetson: PyTorch -> ONNX -> TensorRT, measured and power-capped.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"edgert {version()}")
    _verbosity(parser, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"edgert.apps.commands.{name.replace('-', '_')}").add_parser(sub)
    for command in sub.choices.values():  # accepted after the subcommand too: edgert run ... -v
        _verbosity(command, argparse.SUPPRESS)
    return parser


def _verbosity(parser: argparse.ArgumentParser, default) -> None:
    group = parser.add_argument_group("output")
    group.add_argument(
        "--debug", action="store_true", default=default, help="show tracebacks and debug logs"
    )
    group.add_argument(
        "-v", "--verbose", action="count", default=default, help="more log lines (-vv: debug)"
    )
    group.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="errors only, no warnings"
    )


def _log_level(args) -> int:
    debug = getattr(args, "debug", False)
    verbose = getattr(args, "verbose", 0) or 0
    if debug or verbose >= 2:
        return logging.DEBUG
    if verbose == 1:
        return logging.INFO
    return logging.ERROR if getattr(args, "quiet", False) else logging.WARNING


_stop_reason = ["interrupted"]


def _sigterm_as_interrupt() -> None:
    """SIGTERM (docker stop, systemd) ends long work the way Ctrl-C does: outputs are finished
    (video files closed, summaries printed) and the exit code is 143."""

    def handler(signum, frame):
        _stop_reason[0] = "terminated"
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    _sigterm_as_interrupt()  # first: a stop during start-up is handled too
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print(f"edgert: {_stop_reason[0]}", file=sys.stderr)
        return 143 if _stop_reason[0] == "terminated" else 130
    args.debug = getattr(args, "debug", False)
    logging.basicConfig(level=_log_level(args), format="edgert: %(levelname)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except EdgertError as exc:
        if args.debug:
            raise
        print(f"edgert {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"edgert {args.command}: {_stop_reason[0]}", file=sys.stderr)
        return 143 if _stop_reason[0] == "terminated" else 130
    except BrokenPipeError:  # `edgert run ... | head -1`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 141  # as a process killed by SIGPIPE
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if args.debug:
            raise
        print(
            f"edgert {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(run with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
