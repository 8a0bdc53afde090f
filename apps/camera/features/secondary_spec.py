"""``--secondary BUNDLE[:OPTIONS]``: the option read (:class:`SecondarySpec`) and what is said
at start of an option that can do nothing (``on=`` naming no label of the primary). The
secondaries and the stage that runs them are :mod:`.secondary_models`."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from edgert.runtime.errors import OutputError

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
# an object's own record fields and the extras tasks write: a secondary's name is none of them
RESERVED = {
    "box",
    "score",
    "class_id",
    "label",
    "track_id",
    "predicted",
    "age_s",
    "keypoints",
    "mask_area",
    "outline",
    "rbox",
    "angle",
    "corners",
    "classes",
}


@dataclass(frozen=True)
class SecondarySpec:
    """One ``--secondary BUNDLE[:key=value,...]`` (see the option's help)."""

    bundle: str
    name: str = ""  # as results and metrics name it (default: the bundle's name)
    on: tuple = ()  # the primary labels it runs on (empty: every)
    streams: tuple = ()  # the streams (cameras) it runs on (empty: every)
    margin: float = 0.1  # share of each side added around the box
    attempts: int = 3  # most attempts per track
    grow: float = 0.2  # re-check when the box's area grew by this share since the last attempt
    every_s: float = 1.0  # re-check after this long (0: never): the budget spread over a track
    min_size: int = 16  # a box's shorter side under this (pixels) is refused
    window_s: float = 0.5  # the best crop is chosen over this long before an attempt
    # an embedder's: the track's vector (mean: quality-weighted over its crops; best: the best
    # crop's), its stored form, and re-identification across streams (reid: the least cosine,
    # 0 off; reid_window: how recent the other stream's track was, seconds). Measured on
    # vtest.avi as two cameras (benchmarks/reid.py, MobileNetV2's features): the mean retrieves
    # better (recall@1 0.67 against the best crop's 0.51). reid held out (reports/
    # reid_heldout.json; chosen on one part of the footage, measured on the other): 0.85 is the
    # middle of where the goal (precision >= 0.9, recall >= 0.7) holds on both halves (0.83 to
    # 0.86), at least as good as 0.86 on every part, and on the whole footage its links have
    # precision 0.95 and recall 0.82 (reports/reid.json); on the first third alone only 0.87
    # keeps precision >= 0.9. int8 costs recall@10 at most 0.1 point against float32
    # (benchmarks/embed_retrieval.py)
    embed: str = "mean"
    form: str = "int8"
    reid: float = 0.85
    reid_window_s: float = 30.0

    KEYS = {
        "name": ("name", str),
        "on": ("on", lambda v: tuple(x for x in v.split("+") if x)),
        "streams": ("streams", lambda v: tuple(int(x) for x in v.split("+") if x)),
        "margin": ("margin", float),
        "attempts": ("attempts", int),
        "grow": ("grow", float),
        "every": ("every_s", float),
        "min": ("min_size", int),
        "window": ("window_s", float),
        "embed": ("embed", str),
        "form": ("form", str),
        "reid": ("reid", float),
        "reid_window": ("reid_window_s", float),
    }

    @classmethod
    def parse(cls, text: str) -> SecondarySpec:
        """``BUNDLE`` or ``BUNDLE:key=value,...``; OutputError with one sentence otherwise."""
        head, colon, tail = text.rpartition(":")
        path, opts = (head, tail) if colon and "=" in tail else (text, "")
        if not path:
            raise OutputError(f"--secondary {text}: give a bundle, then :key=value options")
        values: dict = {}
        for part in filter(None, opts.split(",")):
            key, eq, value = part.partition("=")
            if key not in cls.KEYS or not eq:
                raise OutputError(
                    f"--secondary {text}: unknown option {part!r} (options: "
                    f"{', '.join(k + '=' for k in cls.KEYS)})"
                )
            attr, kind = cls.KEYS[key]
            if attr in values:  # name=x,name=y: which one was meant is not ours to guess
                raise OutputError(f"--secondary {text}: {key}= is given twice; give it once")
            try:
                values[attr] = kind(value)
            except ValueError:
                raise OutputError(f"--secondary {text}: {key}={value} is not a number") from None
            if isinstance(values[attr], float) and not math.isfinite(values[attr]):
                raise OutputError(f"--secondary {text}: {key}={value} is not a finite number")
        spec = cls(path, **values)
        for bad, why in (
            (spec.attempts < 1, "attempts must be at least 1"),
            (not 0 <= spec.margin <= 1, "margin is a share of the box's side, 0 to 1"),
            (spec.grow <= 0, "grow is a share of the area, above 0"),
            (spec.every_s < 0 or spec.window_s < 0, "times are seconds, 0 or more"),
            (spec.min_size < 1, "min is pixels, at least 1"),
            (any(s < 0 for s in spec.streams), "streams= are streams' numbers, 0 or more"),
            (spec.embed not in ("mean", "best"), "embed= is mean or best"),
            (spec.form not in ("int8", "float16", "float32"), "form= is int8, float16 or float32"),
            (not 0 <= spec.reid <= 1, "reid= is a cosine similarity, 0 (off) to 1"),
            (spec.reid_window_s <= 0, "reid_window= is seconds, above 0"),
            (
                spec.name and (not NAME.fullmatch(spec.name) or spec.name in RESERVED),
                f"name={spec.name}: a name is a letter then letters, digits, '_' or '-', and not "
                "one of an object's own fields",
            ),
        ):
            if bad:
                raise OutputError(f"--secondary {text}: {why}")
        return spec


def check_streams(specs, streams: int) -> None:
    """OutputError when a second stage's ``streams=`` names a stream the run does not have."""
    for spec in specs:
        missing = [s for s in spec.streams if s >= streams]
        if missing:
            raise OutputError(
                f"--secondary {spec.bundle}: streams={'+'.join(map(str, spec.streams))}: there is "
                f"no stream {missing[0]} (the run has {streams})"
            )


def unknown_on(spec: SecondarySpec, labels) -> str | None:
    """The sentence for ``on=`` naming labels the primary model does not have (``labels``: its
    labels; None: a model without names, nothing to check), or None."""
    missing = [x for x in spec.on if x not in (labels or spec.on)]
    if not missing:
        return None
    known = [x for x in spec.on if x not in missing]
    shown = ", ".join(str(x) for x in list(labels)[:20])
    if len(labels) > 20:
        shown += f" and {len(labels) - 20} more"
    verb = "is not a label" if len(missing) == 1 else "are not labels"
    runs = f"it runs on {'+'.join(known)} only" if known else "it runs on nothing"
    return (
        f"--secondary {spec.bundle}: on={'+'.join(spec.on)}: {', '.join(missing)} {verb} of the "
        f"primary model (its labels: {shown}); {runs}"
    )
