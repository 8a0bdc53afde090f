"""Argument types for the command line: numbers that must be finite and in range, so a negative
duration or a NaN power cap is refused when parsed, in one sentence, never silently accepted."""

from __future__ import annotations

import argparse
import math

from edgert.runtime.precision import CHOICES

# the same list as edgert.runtime.engine's (a test keeps them equal); here so that --help and
# argument parsing import no numpy (edgert.runtime.precision imports nothing)
BACKENDS = ("auto", "tensorrt", "onnxruntime")
PRECISIONS = CHOICES


def _number(text: str, kind: type) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {'a whole number' if kind is int else 'a number'}"
        ) from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _at_least(kind: type, low, strict: bool):
    """A parser of numbers of ``kind`` above ``low`` (``strict``) or at least ``low``."""
    words = "a positive number" if strict else ("at least 1" if low == 1 else "0 or more")

    def parse(text: str):
        value = _number(text, kind)
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"must be {words}, not {text}")
        return value

    return parse


positive_int = _at_least(int, 1, strict=False)
nonneg_int = _at_least(int, 0, strict=False)
positive_float = _at_least(float, 0.0, strict=True)
nonneg_float = _at_least(float, 0.0, strict=False)


def finite_float(text: str) -> float:
    return _number(text, float)


def fraction(text: str) -> float:
    value = _number(text, float)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def port(text: str) -> int:
    from edgert.apps.uris import port_number

    try:
        return port_number(text, free=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the sentence and where to look), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_power_arguments(
    parser, sysfs_help: str = "read power sensors and thermal zones under DIR"
) -> None:
    """The power and heat flags every command that runs a model takes (camera, bench)."""
    parser.add_argument(
        "--power-cap",
        type=positive_float,
        metavar="W",
        help="pace inference to keep average power under W watts",
    )
    parser.add_argument(
        "--temp-cap",
        type=positive_float,
        metavar="C",
        help="pace inference so the hottest thermal zone settles at or below C °C (with "
        "--power-cap too: the tighter wins); edgert power suggests one",
    )
    parser.add_argument("--sysfs-root", metavar="DIR", help=sysfs_help)
