"""Issue 67, step 5: runtime/'s root modules moved into rooms (tasks/, images/, tracking/,
backends/), and the tests that mirror them. ``MOVES`` maps each old module to its new one; this
script rewrites a tree's references to them, so that a branch written before the moves can be
brought over after the merge:

    python scripts/rooms_moves.py runtime apps quantize export tests benchmarks scripts

Each PATH is a .py file or a folder (its *.py files). What is rewritten, in place:

- dotted names anywhere in a file: ``from edgert.runtime.heads import Head``, ``import
  edgert.runtime.tracking``, importlib strings (``"edgert.runtime.faces"``), mock and monkeypatch
  targets (``"edgert.runtime.images.cv2"``), docstrings, ``tests.runtime.X`` helpers;
- ``from edgert.runtime import heads`` (a moved module imported from its package);
- relative imports inside the product folders, also in a moved module whose relative imports
  were written from its old place (``from .errors import X`` in runtime/tasks/heads.py);
- repository paths (``runtime/heads.py``, ``tests/runtime/test_heads.py``).

A name is rewritten by the longest module it starts with, among the old and the new names: a
name already under its new module is left alone, so the script may be run again. Two rooms are
the package a module became (``runtime/images.py`` -> ``runtime/images/__init__.py``, and
``tracking``): their names stay, their relative imports and paths change. The product folders'
modules are read from the tree this script lives in. Then ``ruff check --select I --fix`` and
``ruff format`` tidy the files it changed (where ruff is installed), so that the imports are
sorted as in the rest of the code.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("runtime", "apps", "quantize", "export")

MOVES = {
    # task decoding: the heads, NMS and boxes, post-processing, the face task, the model interface
    "edgert.runtime.heads": "edgert.runtime.tasks.heads",
    "edgert.runtime.detection": "edgert.runtime.tasks.detection",
    "edgert.runtime.postprocess": "edgert.runtime.tasks.postprocess",
    "edgert.runtime.faces": "edgert.runtime.tasks.faces",
    "edgert.runtime.task_model": "edgert.runtime.tasks.task_model",
    # image work: reading image files (the room's package itself), preprocessing, resizing,
    # captions drawn on a picture
    "edgert.runtime.images": "edgert.runtime.images",
    "edgert.runtime.preprocess": "edgert.runtime.images.preprocess",
    "edgert.runtime.resize": "edgert.runtime.images.resize",
    "edgert.runtime.captions": "edgert.runtime.images.captions",
    # tracking: the tracker (the room's package itself), its Kalman filter, the line and zone
    # counters
    "edgert.runtime.tracking": "edgert.runtime.tracking",
    "edgert.runtime.kalman": "edgert.runtime.tracking.kalman",
    "edgert.runtime.counting": "edgert.runtime.tracking.counting",
    # the TensorRT plan's life beside the backends
    "edgert.runtime.plan_cache": "edgert.runtime.backends.plan_cache",
    "edgert.runtime.plan_check": "edgert.runtime.backends.plan_check",
    # the tests that mirror them
    "tests.runtime.test_heads": "tests.runtime.tasks.test_heads",
    "tests.runtime.test_non_finite_heads": "tests.runtime.tasks.test_non_finite_heads",
    "tests.runtime.test_detection": "tests.runtime.tasks.test_detection",
    "tests.runtime.test_rotated_nms": "tests.runtime.tasks.test_rotated_nms",
    "tests.runtime.test_task_registry": "tests.runtime.tasks.test_task_registry",
    "tests.runtime.test_preprocess": "tests.runtime.images.test_preprocess",
    "tests.runtime.test_preprocess_parity": "tests.runtime.images.test_preprocess_parity",
    "tests.runtime.preprocess_reference": "tests.runtime.images.preprocess_reference",
    "tests.runtime.test_image_bombs": "tests.runtime.images.test_image_bombs",
    "tests.runtime.test_tracking": "tests.runtime.tracking.test_tracking",
    "tests.runtime.test_tensorrt_audit": "tests.runtime.backends.test_tensorrt_audit",
    "tests.runtime.test_tensorrt_backend_api": "tests.runtime.backends.test_tensorrt_backend_api",
    "tests.runtime.test_tensorrt_compat": "tests.runtime.backends.test_tensorrt_compat",
    "tests.runtime.test_tensorrt_real_api": "tests.runtime.backends.test_tensorrt_real_api",
}
NEW = set(MOVES.values())
OLD_OF = {new: old for old, new in MOVES.items()}
DOTTED = re.compile(r"(?<![\w.])(?:edgert|tests)(?:\.\w+)+")
PATH = re.compile(r"(?<![\w.-])((?:tests/)?(?:runtime|apps|quantize|export)(?:/\w+)+)\.py\b")


def tree_modules() -> set[str]:
    out = set()
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT).with_suffix("").parts if p != "__init__"]
            out.add("edgert." + ".".join(parts))
    return out


KNOWN = tree_modules() | set(MOVES) | NEW


def moved(name: str) -> str:
    """``name`` (a module, or a name in one) with the longest old module it starts with replaced;
    unchanged where its longest match is a new module, or there is none."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in NEW:
            return name
        if head in MOVES:
            return ".".join([MOVES[head], *parts[n:]])
    return name


def module_of(path: Path) -> tuple[str, bool] | None:
    """(the dotted module of a file in a product folder, whether it is a package's __init__)."""
    try:
        parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    except ValueError:
        return None
    if not parts or parts[0] not in FOLDERS:
        return None
    package = parts[-1] == "__init__"
    return "edgert." + ".".join(p for p in parts if p != "__init__"), package


def _resolve(module: str, package: bool, node: ast.ImportFrom) -> str:
    base = module.split(".") if package else module.split(".")[:-1]
    anchor = base[: len(base) - node.level + 1]
    return ".".join(anchor + ([node.module] if node.module else []))


def _score(base: str, names: list[str]) -> int:
    return (base in KNOWN) + sum(f"{base}.{n}" in KNOWN for n in names)


def _relative(target: str, module: str, package: bool) -> tuple[int, str]:
    """(level, module part) of ``target`` written relative to ``module``."""
    here = module.split(".") if package else module.split(".")[:-1]
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return len(here) - common + 1, ".".join(there[common:])


def _statement(node: ast.ImportFrom, where: tuple | None) -> list[str] | None:
    """The statement(s) replacing ``node``, or None where it stays as it is."""
    names = [a.name for a in node.names]
    if node.level:
        if where is None:
            return None
        module, package = where
        base = _resolve(module, package, node)
        old = OLD_OF.get(module)
        if old is not None:  # a moved file: its imports may be written from its old place
            from_old = _resolve(old, False, node)  # (each was a module, not a package)
            if _score(from_old, names) > _score(base, names):
                base = from_old
    else:
        base = node.module or ""
        if not any(f"{base}.{n}" in MOVES for n in names):
            return None  # the dotted-name pass rewrites it
    groups: dict[tuple[str, bool], list[str]] = {}
    for alias in node.names:
        full = f"{base}.{alias.name}"
        if full in MOVES or full in NEW:  # a module imported from its package
            new = moved(full)
            parent, _, last = new.rpartition(".")
            rename = alias.asname or (alias.name if last != alias.name else None)
            groups.setdefault((parent, True), []).append(last + (f" as {rename}" if rename else ""))
        else:
            text = alias.name + (f" as {alias.asname}" if alias.asname else "")
            groups.setdefault((moved(base), False), []).append(text)
    out = []
    for (target, _), items in groups.items():
        if node.level:
            level, rest = _relative(target, *where)
            target = "." * level + rest
        out.append(f"from {target} import {', '.join(items)}")
    return out


def _original(node: ast.ImportFrom, lines: list[str]) -> str:
    chunk = lines[node.lineno - 1 : node.end_lineno]
    return " ".join(line.strip() for line in chunk)


def rewrite_imports(text: str, where: tuple | None) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        new = _statement(node, where)
        if new is None:
            continue
        old = ast.unparse(node)
        if new == [old]:
            continue
        edits.append((node, new))
    for node, new in sorted(edits, key=lambda e: -e[0].lineno):
        first, last = node.lineno - 1, node.end_lineno - 1
        indent = lines[first][: node.col_offset]
        tail = lines[last][node.end_col_offset :]
        inner = "".join(lines[first : last + 1])[node.col_offset :]
        comments = re.findall(r"#[^\n]*", inner[: len(inner) - len(tail)])
        body = ("\n" + indent).join(new)
        if comments and not tail.strip():
            body += "  " + comments[0]
        lines[first : last + 1] = [indent + body + tail]
    return "".join(lines)


def _path(match: re.Match) -> str:
    rel = match.group(1)
    dotted = rel.replace("/", ".")
    dotted = dotted if rel.startswith("tests/") else "edgert." + dotted
    new = moved(dotted)
    if dotted not in MOVES or new == dotted and not (ROOT / rel).is_dir():
        return match.group(0)
    new = (new[len("edgert.") :] if new.startswith("edgert.") else new).replace(".", "/")
    return new + ("/__init__.py" if (ROOT / new).is_dir() else ".py")


def rewrite(text: str, where: tuple | None) -> str:
    text = rewrite_imports(text, where)
    text = DOTTED.sub(lambda m: moved(m.group(0)), text)
    return PATH.sub(_path, text)


def files(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    me = Path(__file__).resolve()  # its own table stays as it is
    return [p for p in out if ".venv" not in p.parts and p.resolve() != me]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    changed = []
    for path in files(argv):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, module_of(path))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(str(path))
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if changed and ruff:
        subprocess.run([ruff, "check", "-q", "--select", "I", "--fix", *changed], check=False)
        subprocess.run([ruff, "format", "-q", *changed], check=False)
    print(f"{len(changed)} file(s) rewritten" + ("" if ruff or not changed else "; ruff not found"))
    for c in changed:
        print(" ", c)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
