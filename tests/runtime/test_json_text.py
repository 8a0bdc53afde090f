"""Every JSON writer edgert has writes JSON (RFC 8259): a NaN or infinity that reaches one (a
broken model's, a reading of nothing) is ``null``, never the bare ``NaN`` token that
JavaScript's JSON.parse and Go's encoding/json refuse, and the writer goes on (round 6, G6)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from edgert.runtime.json_text import dumps, finite

ROOT = Path(__file__).resolve().parents[2]


def strict(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as other languages' readers do."""

    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_null_and_the_rest_is_as_json_writes_it():
    value = {
        "box": (math.nan, 1.5, math.inf, -math.inf),
        "score": np.float64("nan"),  # a float subclass: json writes it as a number
        "nested": [{"x": [float("nan")]}, "NaN", None, True, 3],
        "kept": np.float32(0.5),  # not JSON: default=str says what it is
    }
    text = dumps(value, default=str)
    assert strict(text) == {
        "box": [None, 1.5, None, None],
        "score": None,
        "nested": [{"x": [None]}, "NaN", None, True, 3],
        "kept": "0.5",
    }
    plain = {"a": [1, 2.5, "x"], "b": {"c": None}}
    assert dumps(plain, indent=2) == json.dumps(plain, indent=2)
    assert finite((1.0, float("inf"))) == [1.0, None]


def test_the_camera_jsonl_sink_writes_a_nan_as_null_and_goes_on(tmp_path):
    from edgert.apps.camera.sinks.jsonl import JsonlOutput

    out = JsonlOutput(str(tmp_path / "f.jsonl"), {"streams": []})
    out.line({"results": [{"box": [math.nan, 0, 1, 1], "score": math.inf}]})
    out.line({"results": []})
    out.close()
    lines = [strict(x) for x in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert lines[1] == {"results": [{"box": [None, 0, 1, 1], "score": None}]}
    assert lines[2] == {"results": []}


def test_the_http_answers_write_a_nan_as_null():
    from edgert.apps.telemetry.http import json_answer

    code, body, kind = json_answer(200, {"fps": math.nan, "streams": [{"fps": math.inf}]})
    assert strict(body.decode()) == {"fps": None, "streams": [{"fps": None}]}


def test_no_writer_in_runtime_or_apps_calls_json_dumps_itself():
    # the writers go through json_text.dumps; only these write what cannot hold a NaN (file
    # names, hashes, sizes, a Triton config) or belong to the plan cache's own format
    allowed = {
        "runtime/power/clocks.py",  # pid, time, sysfs paths and their text
        "runtime/backends/plan_key.py",  # a hash's input: strings and ints
        "runtime/backends/plan_cache.py",  # a plan's sidecar: versions, names, hashes
        "runtime/bundle.py",  # the manifest: read back by edgert (see the report)
        "apps/camera/sinks/retention.py",  # clip names, sizes and times from os.stat
        "apps/commands/cache.py",  # plan file names and sizes
        "apps/commands/export_triton.py",  # a model folder's file names
        "apps/swap/serve.py",  # Triton's model config
        "runtime/json_text.py",
    }
    found = set()
    for folder in ("runtime", "apps"):
        for path in (ROOT / folder).rglob("*.py"):
            if re.search(r"\bjson\.dumps?\(", path.read_text(encoding="utf-8")):
                found.add(str(path.relative_to(ROOT)))
    assert found <= allowed, sorted(found - allowed)
