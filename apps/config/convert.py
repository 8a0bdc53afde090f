"""The site's data and the command line's flags, both ways: :func:`to_namespace` (the file's
validated data -> the namespace ``edgert camera``'s flags parse into) and :func:`from_namespace`
(the flags -> the file's data, only what differs from the defaults). A camera's lines, zones and
masks are the flags' ``STREAM:`` forms; ``defaults:`` the forms without a stream."""

from __future__ import annotations

from . import flags as flag_table
from .model import own_type

GEOMETRY = (("lines", "line"), ("zones", "zone"), ("motion_masks", "motion_mask"))
OWN = (  # a camera's own value: the flag of its stream's form, the camera's key
    *(("stream_gate", "gate"), ("stream_target_fps", "target_fps")),
    *(("stream_clips", "clips"), ("stream_snapshots", "snapshots")),
)


def _number(v: float) -> str:
    return repr(float(v)) if v != int(v) else str(int(v))


def spec(kind: str, item, stream=None) -> str:
    """The flag's form of one line, zone (``[STREAM:]NAME=x1,y1,...``) or mask."""
    points = item["points"] if kind != "motion_masks" else item
    coordinates = ",".join(_number(v) for p in points for v in p)
    head = "" if stream is None else f"{stream}:"
    return head + (coordinates if kind == "motion_masks" else f"{item['name']}={coordinates}")


def geometry_flags(data: dict) -> dict:
    """dest -> [flag forms] of the cameras' lines, zones and masks: a camera's own list for it
    alone; ``defaults:``' for every camera (without a stream when no camera has its own)."""
    cameras = list(data["cameras"].values())
    out: dict = {}
    for key, dest in GEOMETRY:
        default = data.get("defaults", {}).get(key) or []
        if all(c.get(key) is None for c in cameras):
            out[dest] = [spec(key, item) for item in default]
            continue
        out[dest] = [
            spec(key, item, i)
            for i, c in enumerate(cameras)
            for item in (default if c.get(key) is None else c[key])
        ]
    return out


def stage_spec(item, names=()) -> str:
    """``--secondary``'s form of a second stage written out as a mapping (or as that form); its
    ``cameras:`` (names) are ``streams=`` (their places in ``names``, the cameras' order)."""
    if isinstance(item, str):
        return item
    from .model import STAGE_KEYS

    flag_key = {v: k for k, v in STAGE_KEYS.items()}
    options = []
    for key, value in item.items():
        if key != "bundle" and value is not None:
            key = flag_key.get(key, key)
            if key == "streams":  # a name the site lacks: config check says so (checks.stages)
                value = [str(list(names).index(n)) for n in value if n in names]
            text = "+".join(value) if key in ("on", "streams") else value
            text = _number(text) if isinstance(text, (int, float)) else text
            options.append(f"{key}={text}")
    return item["bundle"] + (":" + ",".join(options) if options else "")


def to_namespace(data: dict):
    """The flags' namespace of the site's validated data (``model_dump()``)."""
    ns = flag_table.defaults()
    for section, found in flag_table.sections().items():
        if section == "cameras":
            continue
        given = data.get(section) or {}
        for f in found:
            if f.key in given:
                value = given[f.key]
                if f.many:
                    names = list(data["cameras"])
                    value = [stage_spec(v, names) if isinstance(v, dict) else v for v in value]
                elif own_type(f.action) and value is not None:
                    value = f.action.type(str(value))  # checked before: checks.values
                setattr(ns, f.action.dest, value)
    cameras = list(data["cameras"].values())
    ns.source = [c["source"] for c in cameras]
    for dest, forms in geometry_flags(data).items():
        setattr(ns, dest, forms)
    for dest, key in OWN:
        forms = [f"{i}:{_value(c[key])}" for i, c in enumerate(cameras) if c.get(key) is not None]
        setattr(ns, dest, forms)
    ns.stream_output = [f"{i}:{u}" for i, c in enumerate(cameras) for u in c.get("outputs") or []]
    return ns


def _value(v) -> str:
    if isinstance(v, bool):  # a camera's clips: false is --stream-clips N:off
        return "on" if v else "off"
    return _number(v) if isinstance(v, (int, float)) else str(v)


def from_namespace(args) -> dict:
    """The site's data of a command line: every section's flags that differ from their default,
    a camera per ``--source`` (cam0, cam1, ...) with its lines, zones and masks."""
    data: dict = {}
    for section, found in flag_table.sections().items():
        if section == "cameras":
            continue
        for f in found:
            value = getattr(args, f.action.dest, f.action.default)
            if value != f.action.default and not (f.many and not value):
                data.setdefault(section, {})[f.key] = list(value) if f.many else _text(f, value)
    sources = list(args.source or ["synthetic://"])
    cameras = {f"cam{i}": {"source": s} for i, s in enumerate(sources)}
    defaults = _geometry(args, cameras)
    _own(args, cameras)
    if defaults:
        data["defaults"] = defaults
    data["cameras"] = cameras
    return data


def _own(args, cameras: dict) -> None:
    """Each ``--stream-gate|target-fps|clips|snapshots|output STREAM:VALUE`` as its camera's own;
    SourceError in one sentence for a form that is not ``STREAM:VALUE`` of a stream the run has."""
    from edgert.apps.camera.gate_options import split_stream
    from edgert.apps.camera.sinks import own
    from edgert.runtime.errors import SourceError

    for stream, uri in own.parse(getattr(args, "stream_output", None) or [], len(cameras)):
        cameras[f"cam{stream}"].setdefault("outputs", []).append(uri)
    for dest, key in OWN:
        flag = "--" + dest.replace("_", "-")
        for form in getattr(args, dest, None) or []:
            stream, value = split_stream(form, flag)
            if f"cam{stream}" not in cameras:
                raise SourceError(f"{flag} {form}: there is no stream {stream}")
            if key in ("clips", "snapshots"):
                if value not in ("on", "off"):
                    raise SourceError(f"{flag} {form}: give STREAM:on or STREAM:off")
                value = value == "on"
            elif key == "target_fps":
                try:
                    value = float(value)
                except ValueError:
                    value = -1.0
                if not 0 < value < float("inf"):
                    raise SourceError(f"{flag} {form}: give STREAM:N, N above 0")
            cameras[f"cam{stream}"][key] = value


def _text(f, value):
    """What the file writes for a flag's parsed value: the value, or for a flag of its own type
    whose word parses to it (``forever`` for --reconnect's None), that word."""
    if value is not None or not own_type(f.action):
        return value
    words = [w for w in str(f.action.metavar or "").split("|") if not w.isupper()]
    return next((w for w in words if f.action.type(w) is None), value)


def _geometry(args, cameras: dict) -> dict:
    """Each camera's own lines, zones and masks (the forms without a stream are every camera's:
    ``defaults:``, repeated in a camera that has its own); the defaults returned."""
    from edgert.apps.camera.analytics import parse_geometry
    from edgert.apps.camera.gate import parse_mask

    n = len(cameras)
    defaults: dict = {}
    for key, dest in GEOMETRY:
        found = []  # (stream or None, item)
        for text in getattr(args, dest, None) or []:
            if key == "motion_masks":
                stream, points = parse_mask(text, n)
                found.append((stream, [[float(x), float(y)] for x, y in points]))
            else:
                g = parse_geometry(text, dest, n)
                found.append((g.stream, {"name": g.name, "points": [list(p) for p in g.points]}))
        common = [item for stream, item in found if stream is None]
        if common:
            defaults[key] = common
        for i, camera in enumerate(cameras.values()):
            own = [item for stream, item in found if stream == i]
            if own:
                camera[key] = common + own
    return defaults
