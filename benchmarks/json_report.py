"""Where every benchmark's numbers go: one JSON file (its folder made), and a line saying so."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: str | Path, data, **dumps) -> Path:
    """``data`` as indented JSON at ``path``; ``dumps``: more json.dumps arguments."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, **dumps))
    print(f"wrote {out}")
    return out
