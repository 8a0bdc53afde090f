"""The site file's YAML read with PyYAML's composed nodes, which carry their marks: the data, and
the line of every key and item by its path, so that an error names where it is in the file. A key
given twice in one mapping is an error (YAML's own rule; PyYAML would keep the last silently)."""

from __future__ import annotations

import re

import yaml

Path = tuple  # ('cameras', 'door', 'lines', 1): mapping keys and sequence indexes


class Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's booleans: only true and false. YAML 1.1's ``on``,
    ``off``, ``yes`` and ``no`` are words here (``gate: off`` is the mode off, not False; a
    switch given ``yes`` still reads as true through the model)."""


Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in found if tag != "tag:yaml.org,2002:bool"]
    for first, found in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


class Problems(list):
    """Every problem found, each (path, line or None, message)."""

    def add(self, path: Path, line, message: str) -> None:
        self.append((tuple(path), line, message))


def read(text: str, problems: Problems):
    """(data, lines) of the YAML document ``text``: lines maps each path to its 1-based line.
    A YAML error is added to ``problems`` (data is None then)."""
    try:
        node = yaml.compose(text, Loader=Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        what = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        said = f"{context}, {what}" if context else what
        problems.add((), mark.line + 1 if mark else None, f"not valid YAML: {said}")
        return None, {}
    if node is None:
        return {}, {}
    lines: dict = {}
    _walk(node, (), lines, problems)
    if any(p for p in problems):
        return None, lines
    loader = Loader(text)
    try:
        return loader.get_single_data(), lines
    except yaml.YAMLError as exc:  # a constructor's error: a bad tag, a bad timestamp
        mark = getattr(exc, "problem_mark", None)
        problems.add((), mark.line + 1 if mark else None, f"not valid YAML: {exc.problem}")
        return None, lines
    finally:
        loader.dispose()


def _walk(node, path: Path, lines: dict, problems: Problems) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name in seen:
                problems.add(
                    (*path, name),
                    key.start_mark.line + 1,
                    f"given twice (first on line {seen[name]}): give it once",
                )
                continue
            seen[name] = key.start_mark.line + 1
            lines[(*path, name)] = key.start_mark.line + 1
            _walk(value, (*path, name), lines, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _walk(item, (*path, i), lines, problems)


def line_of(lines: dict, path: Path):
    """The line of ``path``, or of the nearest enclosing path the file has (None: unknown)."""
    path = tuple(path)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def show(path: Path) -> str:
    """``cameras.door.lines[1]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(file)"


class _Dumper(yaml.SafeDumper):
    """Block style, but a list of numbers (a point) on one line."""


def _list(dumper, items):
    flow = bool(items) and all(isinstance(v, (int, float)) for v in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flow)


_Dumper.add_representer(list, _list)


def dump(data: dict) -> str:
    """YAML of ``data`` in its own order, points on one line."""
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
