"""What the site file's types cannot say, checked in the same pass, every problem with its path:
``${ENV}`` references (ours, and set), credentials written in a URI instead of referenced, each
flag's own check of its value, the cameras' lines, zones and masks (their form, their names, inside
the frame when its size is known) and the bundles named (there)."""

from __future__ import annotations

import argparse
import os
import re

from . import flags as flag_table
from .convert import GEOMETRY, spec
from .yamlfile import Problems

VAR = re.compile(r"\$\{([^}]*)\}")


def strings(data, path=()):
    """(path, text) of every string in ``data``."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from strings(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from strings(v, (*path, i))
    elif isinstance(data, str):
        yield path, data


def valid_parts(data: dict, bad: list) -> dict:
    """What the later checks can read of a file the model refused: the sections and cameras
    without an error (the data's own, unvalidated; their values are of the right types)."""

    def clean(*path) -> bool:
        return not any(loc[: len(path)] == path or path[: len(loc)] == loc for loc in bad)

    def keys(value, *path) -> dict:
        return (
            {k: v for k, v in value.items() if clean(*path, k)} if isinstance(value, dict) else {}
        )

    out = {k: keys(v, k) for k, v in data.items() if k != "cameras" and isinstance(v, dict)}
    out.setdefault("model", {})
    cameras = data.get("cameras") if isinstance(data.get("cameras"), dict) else {}
    out["cameras"] = {k: keys(v, "cameras", k) for k, v in cameras.items() if isinstance(v, dict)}
    return out


def environment(data: dict, problems: Problems) -> None:
    """Each ``${NAME}``: named EDGERT_..., and set."""
    from edgert.apps.uris import PREFIX

    for path, text in strings(data):
        for m in VAR.finditer(text):
            name = m.group(1)
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                problems.add(path, None, f"${{{name}}} is not a variable's name")
            elif not name.startswith(PREFIX):
                problems.add(path, None, f"${{{name}}}: only variables named {PREFIX}... are read")
            elif name not in os.environ:
                problems.add(path, None, f"the environment variable {name} is not set")


def credentials(data: dict, problems: Problems) -> None:
    """A URI's password or token written in the file (only ``${EDGERT_...}`` may stand there)."""
    from edgert.apps.uris import redact

    for path, text in strings(data):
        if "://" not in text:
            continue
        masked = VAR.sub("***", text)
        if redact(masked) != masked:
            problems.add(
                path,
                None,
                "a password or token is written in the URI: give it as ${EDGERT_NAME} and set "
                "that variable (a Secret in Kubernetes), so the file holds no secret",
            )


def values(data: dict, problems: Problems) -> None:
    """Each flag's own check (a port, a number's range) of the value the file gives it."""
    for section, found in flag_table.sections().items():
        given = data.get(section) or {}
        for f in found:
            kind = f.action.type
            if f.key not in given or kind is None or kind in (int, float, str):
                continue
            items = given[f.key] if f.many else [given[f.key]]
            for i, value in enumerate(items):
                if value is None:
                    continue
                try:
                    kind(str(value))
                except (argparse.ArgumentTypeError, ValueError) as exc:
                    where = (section, f.key, i) if f.many else (section, f.key)
                    problems.add(where, None, str(exc))


def geometry(data: dict, problems: Problems, size_of) -> None:
    """Every camera's lines, zones and masks (its own or the defaults): their form, one name
    each, inside its frame when ``size_of(index, camera)`` knows the frame's size."""
    cameras = data["cameras"]
    defaults = data.get("defaults") or {}
    for i, (name, camera) in enumerate(cameras.items()):
        size = size_of(i, camera)
        seen: dict = {}
        for key, dest in GEOMETRY:
            own = camera.get(key)
            items, base = (
                (own, ("cameras", name, key))
                if own is not None
                else (
                    defaults.get(key) or [],
                    ("defaults", key),
                )
            )
            for j, item in enumerate(items):
                why = _one(key, dest, item, size)
                if why:
                    problems.add((*base, j), None, why + ("" if own is not None else f" ({name})"))
                if key != "motion_masks" and item["name"] in seen:
                    problems.add(
                        (*base, j, "name"),
                        None,
                        f"{item['name']} is the name of another line or zone of camera {name}",
                    )
                if key != "motion_masks":
                    seen[item["name"]] = True


def _one(key: str, dest: str, item, size) -> str | None:
    """Why one line, zone or mask is refused (None: it is not)."""
    from edgert.apps.camera.analytics import parse_geometry
    from edgert.apps.camera.gate import parse_mask
    from edgert.runtime.errors import EdgertError

    text = spec(key, item)
    try:
        if key == "motion_masks":
            _, points = parse_mask(text, 1)
            return _mask_outside(points, size)
        g = parse_geometry(text, dest, 1)
        if size is not None:
            g.counter("bottom_center").resolve(*size)
    except (EdgertError, ValueError) as exc:
        said = str(exc)
        return said.split(f"{text}: ", 1)[-1]
    return None


def _mask_outside(points, size) -> str | None:
    if size is None:
        return None
    w, h = size
    fractions = all(0 <= v <= 1 for v in points.ravel())
    for x, y in points:
        if not fractions and not (0 <= x <= w and 0 <= y <= h):
            return f"point ({x:g}, {y:g}) is outside the {w}x{h} frame"
    return None


def own(data: dict, problems: Problems) -> None:
    """Each camera's own keys: its gate a mode ``--gate`` takes; its clips or snapshots only
    where the run keeps them (``outputs.clips``, ``outputs.snapshots``); its outputs of a kind
    one camera can have."""
    from edgert.apps.camera.gate_options import gate_mode
    from edgert.apps.camera.sinks import own, scheme_of
    from edgert.runtime.errors import OutputError, SourceError

    outputs = data.get("outputs") or {}
    for name, camera in data["cameras"].items():
        if camera.get("gate") is not None:
            try:
                gate_mode(camera["gate"], "gate")
            except SourceError as exc:
                problems.add(("cameras", name, "gate"), None, str(exc).partition(": ")[2])
        for k, uri in enumerate(camera.get("outputs") or []):
            try:
                scheme_of(uri)
                why = own.why_not_own(uri)
            except OutputError as exc:
                why = str(exc)
            if why:
                problems.add(("cameras", name, "outputs", k), None, why)
        for key in ("clips", "snapshots"):
            sinks = [u for u in outputs.get("uris") or [] if str(u).startswith(f"{key}://")]
            if camera.get(key) is not None and not (outputs.get(key) or sinks):
                problems.add(
                    ("cameras", name, key), None, f"applies to outputs.{key}, and none is given"
                )


def stages(data: dict, problems: Problems) -> None:
    """Each second stage's ``cameras:``: cameras of the site."""
    for i, item in enumerate((data.get("secondaries") or {}).get("bundles") or []):
        if isinstance(item, dict):
            for j, name in enumerate(item.get("cameras") or []):
                if name not in data["cameras"]:
                    problems.add(
                        ("secondaries", "bundles", i, "cameras", j),
                        None,
                        f"no camera is named {name} (cameras: {', '.join(data['cameras'])})",
                    )


def bundles(data: dict, problems: Problems) -> None:
    """The model and each second stage's bundle: there (a file or a bundle's folder)."""
    named = [(("model", "path"), data["model"].get("path"))]
    for i, item in enumerate((data.get("secondaries") or {}).get("bundles") or []):
        if isinstance(item, dict):
            named.append((("secondaries", "bundles", i, "bundle"), item.get("bundle")))
            continue
        head, colon, tail = item.rpartition(":")
        named.append((("secondaries", "bundles", i), head if colon and "=" in tail else item))
    for path, bundle in named:
        if bundle and "${" not in bundle and not os.path.exists(bundle):
            problems.add(path, None, f"{bundle}: no such file or bundle")


def frame_size(data: dict):
    """``size_of(index, camera)``: the frame's (width, height) where it is known before opening
    anything: --width and --height given, synthetic://'s own, or a local video file's."""
    capture = data.get("capture") or {}
    asked = (capture.get("width"), capture.get("height"))

    def size_of(i: int, camera: dict):
        if None not in asked:
            return asked
        source = camera.get("source") or ""
        if source.startswith("synthetic://"):
            return (asked[0] or 640, asked[1] or 480)
        if "://" not in source and os.path.isfile(source):
            return _video_size(source)
        return None

    return size_of


def _video_size(path: str):
    import cv2

    cap = cv2.VideoCapture(path)
    try:
        w, h = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    finally:
        cap.release()
    return (w, h) if w > 0 and h > 0 else None
