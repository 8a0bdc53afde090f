"""The site file's typed model (pydantic), made from the flags' table (:mod:`.flags`): a section
per component with a key per flag (its type, range, choices and help from the flag's own
declaration), and the cameras, each a name, a source and its lines, zones and motion masks, with
``defaults:`` that a camera's own lists replace. Unknown keys are errors everywhere."""

import functools
import typing
from typing import Dict, List, Literal, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, constr, create_model
from typing_extensions import Annotated

from . import flags as flag_table

NAME = r"^[A-Za-z0-9_-]+$"  # a camera's, a line's or a zone's (the command line's own rule)
# any other text: one line, no control character (a URI, a path, a topic: none takes one, and a
# newline in a value could not change the shape of what is rendered from it, the chart's included)
TEXT = r"^[^\x00-\x1f\x7f]*$"
Text = constr(pattern=TEXT)
LABEL = r"^[^,+=:\x00-\x1f\x7f]+$"  # a second stage's label: the flag's form separates by these
# what a value that does not match each pattern is told
PATTERNS = {
    NAME: "a name is ASCII letters, digits, '-' and '_'",
    TEXT: "one line of text, without control characters",
    LABEL: "a label here is text without ',', '+', '=' or ':'",
}
Point = Tuple[float, float]
STRICT = ConfigDict(extra="forbid", protected_namespaces=())  # keys as the flags name them


class Line(BaseModel):
    """A counting line: two points, pixels or fractions of the frame (all within 0..1)."""

    model_config = STRICT
    name: constr(pattern=NAME)
    points: List[Point] = Field(min_length=2, max_length=2)


class Zone(BaseModel):
    """A counting zone: a polygon of three or more points, pixels or fractions of the frame."""

    model_config = STRICT
    name: constr(pattern=NAME)
    points: List[Point] = Field(min_length=3)


Mask = List[Point]  # a polygon whose changes are not motion (--gate motion)


class Defaults(BaseModel):
    """What every camera has unless it gives its own list (a camera's list replaces this one)."""

    model_config = STRICT
    lines: List[Line] = Field(default_factory=list)
    zones: List[Zone] = Field(default_factory=list)
    motion_masks: List[Mask] = Field(default_factory=list)


class Camera(BaseModel):
    """One camera: its source URI (credentials only as ${EDGERT_...} references) and, when given,
    its own lines, zones and motion masks instead of ``defaults:``', its own gate mode and
    target rate instead of the ``gate:`` section's, and outputs of its own."""

    model_config = STRICT
    source: Text = Field(min_length=1)
    lines: Optional[List[Line]] = None
    zones: Optional[List[Zone]] = None
    motion_masks: Optional[List[Mask]] = None
    gate: Optional[Text] = Field(
        None, description="this camera's own gate.mode (off, motion or interval:N)"
    )
    target_fps: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        None, description="this camera's own gate.target_fps: at most N inferred frames a second"
    )
    clips: Optional[bool] = Field(
        None, description="false: no clips of this camera (outputs.clips keeps the others')"
    )
    snapshots: Optional[bool] = Field(
        None, description="false: no snapshots of this camera's tracks (outputs.snapshots)"
    )
    outputs: Optional[List[Text]] = Field(
        None,
        description="this camera's own outputs, of its frames and events alone: a video file, "
        "rtsp://, mqtt[s]://, jsonl:// or events:// (outputs.uris are every camera's)",
    )


def stage_model() -> type:
    """A second stage written out (``secondaries.bundles``' item as a mapping): its bundle and
    the options of ``--secondary BUNDLE:key=value,...``, from that option's own table."""
    import dataclasses

    from edgert.apps.camera.features.secondary_spec import SecondarySpec

    label = constr(pattern=LABEL)
    defaults = {f.name: f.default for f in dataclasses.fields(SecondarySpec)}
    fields: dict = {"bundle": (Text, Field(min_length=1, description="the second model's bundle"))}
    for key, (attr, kind) in SecondarySpec.KEYS.items():
        kind = {str: Text, int: int, float: float}.get(kind, List[label])
        said = {
            "on": "the primary labels it runs on (default: every)",
            "streams": "the cameras it runs on, by name (default: every)",
        }.get(key, attr)
        if key == "streams":
            kind = List[constr(pattern=NAME)]
        if key not in ("on", "streams") and defaults[attr] not in ("", None):
            said += f" (default {defaults[attr]})"
        key = STAGE_KEYS.get(key, key)
        fields[key] = (Optional[kind], Field(default=None, description=said))
    return create_model("SecondStage", __config__=STRICT, **fields)


# a second stage's keys in the file where the flag's would not do: YAML reads a bare on: as true
STAGE_KEYS = {"on": "labels", "streams": "cameras"}  # cameras: by name, the flag's by stream
# a flag's items that the file may also write out as a mapping (the flag's form stays valid)
ITEMS = {("secondaries", "bundles"): stage_model}


def own_type(action) -> bool:
    """The flag reads its text with a type of its own (``N|forever``), not one of _kinds'."""
    return action.type is not None and action.type not in _kinds()


def _kinds() -> dict:
    from edgert.apps import argtypes as a

    return {
        a.positive_int: (int, {"ge": 1}),
        a.nonneg_int: (int, {"ge": 0}),
        a.positive_float: (float, {"gt": 0, "allow_inf_nan": False}),
        a.nonneg_float: (float, {"ge": 0, "allow_inf_nan": False}),
        a.finite_float: (float, {"allow_inf_nan": False}),
        a.fraction: (float, {"ge": 0, "le": 1}),
        a.port: (int, {"ge": 0}),  # and its own check (apps/uris.port_number): checks.values
        int: (int, {}),
        float: (float, {"allow_inf_nan": False}),
    }


def field_of(flag: flag_table.Flag):
    """(type, Field) of one flag: its kind, range and choices, its default and its help."""
    action = flag.action
    # a flag of its own type (``N|forever``): its text or a number, read by that type
    other = Text if action.type is None else Union[int, float, Text]
    kind, limits = _kinds().get(action.type, (other, {}))
    if action.choices:
        kind, limits = Literal[tuple(action.choices)], {}
    text = (action.help or "").replace("%%", "%")
    if flag.switch:
        return bool, Field(default=False, description=text)
    if flag.many:
        item = kind if not limits else Annotated[kind, Field(**limits)]
        if (flag.section, flag.key) in ITEMS:
            item = Union[item, ITEMS[flag.section, flag.key]()]
        return List[item], Field(default_factory=list, description=text)
    if action.default is None:
        kind = Optional[kind]
    default = ... if flag.section == "model" and flag.key == "path" else action.default
    return kind, Field(default=default, description=text, **limits)


@functools.lru_cache(maxsize=1)
def site_model() -> type:
    """The site file's model: its sections from the flags' table, then defaults and cameras."""
    fields: dict = {}
    for section, found in flag_table.sections().items():
        if section == "cameras":
            continue
        own = {f.key: field_of(f) for f in found}
        model = create_model(section.title().replace("_", "") + "Section", __config__=STRICT, **own)
        required = section == "model"
        fields[section] = (model, Field(...) if required else Field(default_factory=model))
    fields["defaults"] = (Defaults, Field(default_factory=Defaults))
    cameras = Dict[constr(pattern=NAME), Camera]
    fields["cameras"] = (cameras, Field(..., min_length=1, description="the cameras, in order"))
    return create_model("Site", __config__=STRICT, **fields)


def json_schema() -> dict:
    """The site file's JSON Schema (draft 2020-12, as pydantic writes it)."""
    schema = _closed(site_model().model_json_schema())
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "edgert site",
        "description": "One camera run of edgert: `edgert camera --config FILE`.",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _closed(node):
    """A map whose keys have a form (the cameras) takes no other key: pydantic says so by its
    ``patternProperties`` alone, which lets any other key through a JSON Schema validator."""
    if isinstance(node, list):
        return [_closed(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if "patternProperties" in out:
        out.setdefault("additionalProperties", False)
    return out


def known_keys(loc: tuple) -> list:
    """The keys the model takes at ``loc`` (a mapping's path in the file), for a sentence."""
    kind = site_model()
    for part in loc:
        kind = _inner(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return []
            kind = field.annotation
        else:
            args = typing.get_args(kind)
            kind = args[-1] if args else None
            kind = _model_in(kind)
    kind = _inner(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _model_in(kind):
    """The mapping of a union of a text and a mapping (a second stage), else ``kind``."""
    if typing.get_origin(kind) is Union:
        models = [
            a for a in typing.get_args(kind) if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        return models[0] if models else kind
    return kind


def _inner(kind):
    """Optional[X] -> X."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) is typing.Union and len(args) == 1 else kind


def draft7(schema: dict, prefix: str = "site") -> tuple:
    """(root, definitions) of ``schema`` for a draft-07 document (the Helm chart's
    values.schema.json): ``$defs`` become ``definitions`` named ``prefix + Name``, tuples
    (``prefixItems``) draft-07's ``items`` lists."""

    def walk(node):
        if isinstance(node, list):
            return [walk(v) for v in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            if k == "$ref":
                out[k] = "#/definitions/" + prefix + v.rsplit("/", 1)[-1]
            elif k == "prefixItems":
                out["items"], out["additionalItems"] = walk(v), False
            elif k not in ("$schema", "$defs"):
                out[k] = walk(v)
        return out

    definitions = {prefix + name: walk(d) for name, d in schema.get("$defs", {}).items()}
    return walk(schema), definitions
