"""A site: one camera run as a file (:func:`load_site`) or as a command line
(:func:`site_from_args`), validated as one model and turned into the run's
:class:`~edgert.apps.camera.options.CameraConfig`. Every problem of a file is found in one pass and
raised together (:class:`ConfigError`), each with its path and line."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from edgert.runtime.errors import EdgertError

from . import checks, convert, yamlfile
from . import flags as flag_table
from .model import known_keys, site_model


class ConfigError(EdgertError):
    """A site configuration refused: ``problems`` holds every (path, line, message); ``str()``
    is one line per problem, ``cameras.door.lines[1]: ... (site.yaml:23)``."""

    def __init__(self, problems: list, name: str = "<config>") -> None:
        self.problems = list(problems)
        self.name = name
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list:
        from edgert.apps.uris import escape_controls

        out = []
        for path, line, message in self.problems:
            where = f" ({self.name}:{line})" if line else f" ({self.name})"
            out.append(escape_controls(f"{yamlfile.show(path)}: {message}{where}"))
        return out


@dataclass
class Site:
    """A validated site: the run's configuration, its cameras' names in stream order, its data
    as the file would hold it and a short hash of that data (its version)."""

    config: object  # apps.camera.options.CameraConfig
    names: list
    data: dict = field(repr=False)
    version: str = ""

    def redacted(self) -> dict:
        """The running configuration with every URI's credentials masked (for GET /config):
        ``${EDGERT_...}`` references stay as written, a password anywhere is ``***``."""
        from edgert.apps.uris import redact

        def walk(v):
            if isinstance(v, dict):
                return {k: walk(x) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return redact(v) if isinstance(v, str) and "://" in v else v

        return walk(self.data)

    def yaml(self) -> str:
        """The site as a file (what ``--print-config`` prints)."""
        return yamlfile.dump(self.data)


def version_of(data: dict) -> str:
    from edgert.runtime import json_text

    text = json_text.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_site(path) -> Site:
    """The site in the YAML file ``path``; ConfigError with every problem, or when unreadable."""
    name = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError([((), None, f"cannot read it: {why}")], name) from None
    return load_site_text(text, name=name)


def load_site_text(text: str, name: str = "<config>") -> Site:
    """The site in the YAML ``text`` (``name`` is where errors say it is)."""
    problems = yamlfile.Problems()
    data, lines = yamlfile.read(text, problems)
    if data is not None and not isinstance(data, dict):
        problems.add((), 1, "the file must be a mapping of sections (model:, cameras:, ...)")
    if problems:
        raise ConfigError(_placed(problems, lines), name)
    return _validated(data, lines, name)


def _validated(data: dict, lines: dict, name: str) -> Site:
    from pydantic import ValidationError

    problems = yamlfile.Problems()
    checks.environment(data, problems)
    checks.credentials(data, problems)
    try:
        valid = site_model().model_validate(data).model_dump(mode="json", exclude_unset=True)
    except ValidationError as exc:  # the checks below go on with the parts that are valid
        bad = _pydantic(exc, problems)
        valid = checks.valid_parts(data, bad)
    checks.values(valid, problems)
    checks.geometry(valid, problems, checks.frame_size(valid))
    checks.own(valid, problems)
    checks.stages(valid, problems)
    checks.bundles(valid, problems)
    if problems:
        raise ConfigError(_placed(problems, lines), name)
    try:
        config = flag_table.camera_config(convert.to_namespace(valid))
        _feature_checks(config)
    except EdgertError as exc:  # the components' own checks, in the flags' words
        problems.add(*_in_file_words(str(exc)))
        raise ConfigError(_placed(problems, lines), name) from None
    return Site(config, list(valid["cameras"]), valid, version_of(valid))


# the camera features whose start-time check reads only the configuration (no signal handler,
# nothing opened): run by a file's check too
PURE_CHECKS = ("tracking", "clocks", "gate")


def _feature_checks(config) -> None:
    from edgert.apps.camera.features import FEATURES, Run, name_of

    run = Run(cfg=config, say=lambda _: None, uris=list(config.sinks))
    for feature in FEATURES:
        if name_of(feature) in PURE_CHECKS:
            feature().check(run)


# the parts of pydantic's error locations that name no key: a mapping's key itself, a union's
# branches (a second stage as the flag's text, or written out)
UNION_TAGS = ("[key]", "constrained-str", "SecondStage")


def _pydantic(exc, problems) -> list:
    """Each of pydantic's errors as a problem; the paths they are at."""
    bad = []
    for e in exc.errors(include_url=False):
        if "constrained-str" in e["loc"] and isinstance(e["input"], dict):
            continue  # a list of texts or mappings: the mapping's own errors are said
        loc = tuple(part for part in e["loc"] if part not in UNION_TAGS)
        bad.append(loc)
        if e["type"] == "extra_forbidden":
            keys = known_keys(loc[:-1])
            said = f"unknown key (the keys here: {', '.join(keys)})" if keys else "unknown key"
            problems.add(loc, None, said)
        elif e["type"] == "string_pattern_mismatch":
            problems.add(loc, None, _pattern(e))
        elif e["type"] == "missing":
            problems.add(loc, None, "missing: it must be given")
        else:
            problems.add(loc, None, e["msg"][0].lower() + e["msg"][1:])
    return bad


def _pattern(e: dict) -> str:
    from .model import PATTERNS

    pattern = e.get("ctx", {}).get("pattern")
    return f"{e['input']!r}: {PATTERNS.get(pattern, f'must match {pattern}')}"


def _placed(problems, lines: dict) -> list:
    """Each problem with its line: its own, or its nearest enclosing key's."""
    placed = [
        (path, line if line else yamlfile.line_of(lines, path), message)
        for path, line, message in problems
    ]
    return sorted(placed, key=lambda p: p[1] or 0)  # in the file's order (the sort is stable)


def _in_file_words(message: str) -> tuple:
    """(path, line, message) of a component's sentence, which names flags: the path of the flag
    it starts with, and each flag it names written as its key in the file (``gate.target_fps``
    for ``--target-fps``)."""
    import re

    keys = {
        o: (section, f.key)
        for section, found in flag_table.sections().items()
        for f in found
        for o in f.action.option_strings
    }
    keys.update({"--source": ("cameras", "source"), "--line": ("cameras", "lines")})
    first = re.match(r"--[a-z][a-z0-9-]*", message)
    path = keys.get(first.group(0)) if first else None
    if path is not None and path[0] != "cameras":
        message = message[first.end() :].lstrip(": ")
    else:
        path = ()

    def said(m):
        where = keys.get(m.group(0))
        return ".".join(where) if where else m.group(0)

    return path, None, re.sub(r"--[a-z][a-z0-9-]*", said, message)


def site_from_args(args) -> Site:
    """The site of a command line: the flags are written as the file's data, validated as a
    file is, and the run's configuration is made from that data (the flags are only a way of
    writing the file). The flags' own sentences are kept for what they get wrong."""
    from pydantic import ValidationError

    data = convert.from_namespace(args)
    try:
        valid = site_model().model_validate(data).model_dump(mode="json", exclude_unset=True)
    except ValidationError as exc:
        problems = yamlfile.Problems()
        _pydantic(exc, problems)
        raise ConfigError(problems, "the command line") from None
    config = flag_table.camera_config(convert.to_namespace(valid))
    return Site(config, list(valid["cameras"]), valid, version_of(valid))
