"""The Helm chart's values.schema.json takes its camera.site section from `edgert config schema`
(the site file's JSON Schema, made from the camera's flags): this writes it there, as draft-07
definitions named site*. --check: exit 1 when the file is not what this would write.

    python scripts/chart_schema.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from edgert.apps.config.model import draft7, json_schema

VALUES_SCHEMA = Path(__file__).resolve().parents[1] / "deploy/helm/edgert/values.schema.json"


def updated(values: dict) -> dict:
    """``values`` (values.schema.json) with camera.site and its definitions from the model."""
    site, definitions = draft7(json_schema())
    out = dict(values)
    kept = {k: v for k, v in values["definitions"].items() if not k.startswith("site")}
    out["definitions"] = {**kept, "site": site, **definitions}
    camera = out["properties"]["camera"]
    camera["properties"]["site"] = {"$ref": "#/definitions/site"}
    return out


def main(argv: list[str]) -> int:
    text = VALUES_SCHEMA.read_text()
    new = json.dumps(updated(json.loads(text)), indent=2) + "\n"
    if "--check" in argv:
        if new != text:
            print(
                f"{VALUES_SCHEMA}: its camera.site is not `edgert config schema`'s: run {__file__}"
            )
            return 1
        return 0
    VALUES_SCHEMA.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
