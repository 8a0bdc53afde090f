"""The site file's typed model (pydantic), made from the flags' table (:mod:`.flags`): a section
per component with a key per flag (its type, range, choices and help from the flag's own
declaration), and the cameras, each a name, a source and its lines, zones and motion masks, with
``defaults:`` that a camera's own lists replace. Unknown keys are errors everywhere."""

import functools
import typing
from typing import Dict, List, Literal, Optional, Tuple

from pydantic import BaseModel, ConfigDict, Field, constr, create_model
from typing_extensions import Annotated

from . import flags as flag_table

NAME = r"^[A-Za-z0-9_-]+$"  # a camera's, a line's or a zone's (the command line's own rule)
Point = Tuple[float, float]
STRICT = ConfigDict(extra="forbid")


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
    its own lines, zones and motion masks instead of ``defaults:``'."""

    model_config = STRICT
    source: str = Field(min_length=1)
    lines: Optional[List[Line]] = None
    zones: Optional[List[Zone]] = None
    motion_masks: Optional[List[Mask]] = None


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
    kind, limits = _kinds().get(action.type, (str, {}))
    if action.choices:
        kind, limits = Literal[tuple(action.choices)], {}
    text = (action.help or "").replace("%%", "%")
    if flag.switch:
        return bool, Field(default=False, description=text)
    if flag.many:
        item = kind if not limits else Annotated[kind, Field(**limits)]
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
    schema = site_model().model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "edgert site",
        "description": "One camera run of edgert: `edgert camera --config FILE`.",
        **{k: v for k, v in schema.items() if k != "title"},
    }


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
    kind = _inner(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _inner(kind):
    """Optional[X] -> X."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) is typing.Union and len(args) == 1 else kind
