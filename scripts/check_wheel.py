"""Compare a built wheel with the source tree: every module and data file of export/, quantize/,
runtime/ and apps/ that git tracks must be in the wheel under edgert/..., and nothing else.

    python scripts/check_wheel.py dist/edgert-*.whl
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "export": "edgert/export",
    "quantize": "edgert/quantize",
    "runtime": "edgert/runtime",
    "apps": "edgert/apps",
}


def tree_files() -> set[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *FOLDERS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    out = set()
    for rel in tracked:
        folder, _, rest = rel.partition("/")
        if (ROOT / rel).is_file():
            out.add(f"{FOLDERS[folder]}/{rest}")
    return out


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if n.startswith("edgert/")}


def main() -> int:
    wheel = Path(sys.argv[1])
    tree, built = tree_files(), wheel_files(wheel)
    missing, extra = sorted(tree - built), sorted(built - tree)
    print(f"{wheel.name}: {len(built)} files under edgert/; tree: {len(tree)} files")
    for name in missing:
        print(f"  missing from the wheel: {name}")
    for name in extra:
        print(f"  in the wheel but not in the tree: {name}")
    return 1 if missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
