"""The camera's flags as one table of sections: each component (the model, the run, the capture,
the outputs, the store and every camera feature of ``features.FEATURES``) declares its flags with
``add_arguments``; :func:`sections` reads them back from a parser, so the site file's sections,
the JSON Schema and ``edgert camera``'s command line are made from the same declarations and
cannot drift apart. :func:`camera_config` turns the parsed flags into the run's
:class:`~edgert.apps.camera.options.CameraConfig` (the command line and the file both end there).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

# flags that are not the configuration: how the command prints, and the file options themselves
NOT_CONFIG = (
    *("help", "json", "config", "print_config", "debug", "verbose", "quiet"),
    *("watch_config", "config_endpoint"),  # how the file is read again, on the command line
)
# flags that belong to one camera: the file holds them per camera (``cameras:``, ``defaults:``)
PER_CAMERA = {
    **{"source": "source", "line": "lines", "zone": "zones", "motion_mask": "motion_masks"},
    **{"stream_gate": "gate", "stream_target_fps": "target_fps"},  # its own gate and rate
    **{"stream_clips": "clips", "stream_snapshots": "snapshots"},  # false: none of its own
    "stream_output": "outputs",  # its own outputs (sinks.own)
}
# a section's name in the file where the feature's own is not the word a user looks for
TITLES = {"metrics": "telemetry"}
# a key's name in the file where the flag's dest would repeat its section's name
KEYS = {
    ("model", "model"): "path",
    ("outputs", "output"): "uris",
    ("store", "store"): "path",
    ("gate", "gate"): "mode",
    ("clocks", "clocks"): "mode",
    ("secondaries", "secondary"): "bundles",
}


def _tasks() -> list:
    from edgert.runtime.tasks import TASK_SPECS

    return [t.name for t in TASK_SPECS.values() if t.camera]


def adders() -> list:
    """(section, add_arguments) in the order of ``edgert camera --help``."""
    from edgert.apps.camera import features
    from edgert.apps.camera.options import ModelOptions, RunOptions
    from edgert.apps.camera.sinks import SinkOptions, StoreOptions
    from edgert.apps.camera.sources import SourceOptions

    rows = [
        ("model", lambda p: ModelOptions.add_arguments(p, _tasks())),
        ("cameras", _source_flag),
        ("outputs", SinkOptions.add_arguments),
        ("store", StoreOptions.add_arguments),
        ("run", RunOptions.add_arguments),
    ]
    table = sorted(features.FEATURES, key=lambda f: f.help_rank)
    rows += [(f.section or features.name_of(f), f.add_arguments) for f in table]
    rows.append(("capture", SourceOptions.add_arguments))
    return rows


def _source_flag(parser) -> None:
    parser.add_argument(
        "--source",
        action="append",
        metavar="URI",
        help="a camera, stream or file; repeat for several streams (default: synthetic://); "
        "${EDGERT_NAME} is replaced by that environment variable (keep passwords out of argv)",
    )


def add_arguments(parser) -> None:
    """Every section's flags on ``parser`` (``edgert camera``'s)."""
    for _, add in adders():
        add(parser)


@dataclass(frozen=True)
class Flag:
    """One flag as the file sees it: its section and key (the flag's dest), the argparse action."""

    section: str
    key: str
    action: argparse.Action

    @property
    def option(self) -> str:
        """How the command line writes it (``--target-fps``, or ``MODEL`` for the positional)."""
        return self.action.option_strings[-1] if self.action.option_strings else "MODEL"

    @property
    def many(self) -> bool:
        return isinstance(self.action, argparse._AppendAction)

    @property
    def switch(self) -> bool:
        return isinstance(self.action, argparse._StoreTrueAction)


def sections() -> dict:
    """section -> [Flag], read from a parser that each component declared its flags on."""
    parser = argparse.ArgumentParser(add_help=False)
    out: dict = {}
    for name, add in adders():
        before = len(parser._actions)
        add(parser)
        for action in parser._actions[before:]:
            if action.dest in NOT_CONFIG:
                continue
            section = "cameras" if action.dest in PER_CAMERA else TITLES.get(name, name)
            key = KEYS.get((name, action.dest), action.dest)
            out.setdefault(section, []).append(Flag(section, key, action))
    return out


def defaults() -> argparse.Namespace:
    """The namespace of a command line that gives no flag (every dest at its default)."""
    ns = argparse.Namespace()
    for flags in sections().values():
        for f in flags:
            default = f.action.default
            setattr(ns, f.action.dest, list(default) if isinstance(default, list) else default)
    return ns


def camera_config(args):
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
    from edgert.apps.camera.sinks import own as own_outputs
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
        forms = [expand(f, "--stream-output") for f in getattr(args, "stream_output", None) or []]
        own = own_outputs.parse(forms, len(sources))
    except ValueError as exc:
        raise OutputError(str(exc)) from None
    return CameraConfig(
        model=ModelOptions.from_args(args),
        sources=sources,
        sinks=sinks,
        stream_sinks=own,
        source_options=SourceOptions.from_args(args),
        sink_options=SinkOptions.from_args(args),
        run=RunOptions.from_args(args),
        **features.config_sections(args, CameraConfig),
    )
