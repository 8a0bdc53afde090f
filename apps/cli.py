"""The ``edgert`` command line: a thin layer over the library.

Each subcommand lives in ``apps/commands/<name>.py`` with ``add_parser(subparsers)`` and
``run(args) -> int``. Errors a user can cause are ``EdgertError``: printed as one sentence on stderr
with a non-zero exit code and no traceback (``--debug`` shows it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys

# hangup first: SIGHUP is held (apps/hangup.py) before processes imports the runtime
from edgert.apps import hangup, processes
from edgert.apps.argtypes import Parser
from edgert.runtime.device import edgert_version
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
    "events",
    "config",
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


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="edgert",
        description="Edge inference for NVIDIA Jetson: PyTorch -> ONNX -> TensorRT, measured and power-capped.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"edgert {edgert_version()}")
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


def _stopped(command: str | None) -> int:
    """What a command stopped by Ctrl-C or SIGTERM says, and its exit code (130 or 143)."""
    reason = processes.stop_asked() or "interrupted"
    print(f"edgert {command}: {reason}" if command else f"edgert: {reason}", file=sys.stderr)
    return 143 if reason == "terminated" else 130


def _named(argv: list[str] | None) -> str | None:
    """The command ``argv`` names (its first word that is no option), when it is one of
    :data:`COMMANDS`: a stop while the parser is built says "edgert build: interrupted", as it
    does a moment later."""
    first = hangup.command(sys.argv[1:] if argv is None else argv)
    return first if first in COMMANDS else None


class _Stdout:
    """Standard output that turns a write error (``> /dev/full``, a closed descriptor) into one
    OutputError sentence instead of an OSError from deep inside a command."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _fail(self, why: str):
        from edgert.runtime.errors import OutputError

        return OutputError(f"cannot write to standard output: {why}")

    def write(self, text: str) -> int:
        if self._stream is None:
            raise self._fail("it is closed")
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._fail(exc.strerror or str(exc)) from exc

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._fail(exc.strerror or str(exc)) from exc

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _guard_standard_streams() -> None:
    """A closed descriptor 0, 1 or 2 gets /dev/null, so a file opened later cannot take its number
    (print() would then write into it); stdout writes fail with a sentence."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if not isinstance(sys.stdout, _Stdout):
        sys.stdout = _Stdout(sys.stdout)


def _finish_stdout() -> str | None:
    """Flush standard output now (at exit an error would be a traceback); the sentence when that
    fails, after which the descriptor points at /dev/null so the exit cannot fail again."""
    try:
        sys.stdout.flush()
        return None
    except BrokenPipeError:  # the reader left (`| head -1`): nothing to say
        _silence_stdout()
        return None
    except (EdgertError, OSError) as exc:
        _silence_stdout()
        if isinstance(exc, EdgertError):
            return str(exc)
        return f"cannot write to standard output: {exc.strerror}"


def _silence_stdout() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    inner = getattr(sys.stdout, "_stream", None)
    if inner is not None:
        with contextlib.suppress(Exception):
            inner.flush()  # what was buffered goes to /dev/null


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
    except EdgertError as exc:  # --help or --version to a standard output that cannot take it
        _silence_stdout()
        print(f"edgert: error: {exc}", file=sys.stderr)
        return exc.exit_code
    failed = _finish_stdout()
    if failed and code == 0:  # a failure mid-command was said already
        print(f"edgert: error: {failed}", file=sys.stderr)
        return 2
    return code


class _OneLine(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        from edgert.apps.uris import escape_controls

        return escape_controls(
            super().formatMessage(record)
        )  # a traceback (--debug) keeps its lines


def _main(argv: list[str] | None = None) -> int:
    hangup.hold(argv)  # a caller's own argument list (the import looked at sys.argv)
    _guard_standard_streams()
    # first: a stop during start-up is handled too. SIGTERM ends long work the way Ctrl-C does
    # (video files closed, summaries printed); a stop that code turned into an error on its way
    # (an import interrupted says ImportError) is still reported as the stop it was
    restore = processes.stop_on_signals()
    try:
        return _command(argv)
    finally:
        restore()


def _command(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # while the parser was being built: the command named is known
        return _stopped(_named(argv))
    args.debug = getattr(args, "debug", False)
    logging.basicConfig(level=_log_level(args), format="edgert: %(levelname)s: %(message)s")
    for handler in logging.getLogger().handlers:  # a CR/LF in a name cannot forge a log line
        handler.setFormatter(_OneLine(handler.formatter._fmt))
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except EdgertError as exc:
        if processes.stop_asked():
            return _stopped(args.command)
        if args.debug:
            raise
        from edgert.apps.uris import escape_controls

        print(f"edgert {args.command}: error: {escape_controls(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return _stopped(args.command)
    except BrokenPipeError:  # `edgert run ... | head -1`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 141  # as a process killed by SIGPIPE
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if processes.stop_asked():
            return _stopped(args.command)
        if args.debug:
            raise
        from edgert.apps.uris import escape_controls

        print(
            f"edgert {args.command}: internal error: {type(exc).__name__}: "
            f"{escape_controls(str(exc))} (run with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
