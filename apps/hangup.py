"""SIGHUP held from the first moment of a command that re-reads its bundle on it (``edgert
camera``, ``edgert serve``): Python's default for SIGHUP ends the process, and the handler that
re-reads (:func:`edgert.apps.swap.core.catch_hangups`) is installed only once the imports, the
argument parse and the checks are done, close to a second after the start (longer on a Jetson). A
SIGHUP before then (``systemctl restart`` then ``reload`` at once) ended the run with rc 129 and
no word. :mod:`edgert.apps.cli` imports this module first, before anything heavy; until
``catch_hangups`` takes over, a SIGHUP is only counted: the bundle has not been read yet, so the
read that follows is the re-read it asks for. Only the standard library is imported here."""

from __future__ import annotations

import signal
import sys
import threading

COMMANDS = ("camera", "serve")  # those whose SIGHUP re-reads the bundle path
early = [0]  # SIGHUPs counted before the run's own handler took over


def command(argv) -> str | None:
    """The subcommand of an ``edgert`` argument list (the first word that is not an option;
    the options before it are flags)."""
    return next((a for a in argv if not a.startswith("-")), None)


def hold(argv=None) -> None:
    """From now on a SIGHUP is counted, not fatal, when ``argv`` (default ``sys.argv[1:]``)
    runs one of ``COMMANDS``; main thread only, elsewhere nothing changes."""
    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        return
    if command(sys.argv[1:] if argv is None else argv) not in COMMANDS:
        return
    if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # a handler someone set is kept
        signal.signal(signal.SIGHUP, _counted)


def _counted(_signum, _frame) -> None:
    early[0] += 1


hold()  # at import: the first thing edgert.apps.cli does
