"""`make test-quick`: the in-process tests of what you touched, in about a minute.

    python -m tests.quick                     # files changed since the branch left origin/main
    python -m tests.quick runtime/images/preprocess.py apps/cli.py    # name the files instead
    python -m tests.quick tests/apps/test_gate.py -k crossing  # pytest's options pass through
    make test-quick ARGS="runtime/engine.py -x"

Touched files: those changed since ``git merge-base HEAD origin/main`` (HEAD where there is no
origin/main), uncommitted and untracked ones included. A changed test file runs itself; a source
file (``runtime/images/preprocess.py``, the module ``edgert.runtime.images.preprocess``) picks
the tests that mirror it (``tests/runtime/images/test_preprocess*.py``) and those that import it,
directly or through a helper module in tests/; a touched file no test matches picks its package's test folder. They run
with ``-m "not subprocess and not gpu"``: tests that start the edgert CLI, a broker, a browser...
are `make test`'s (tests/markers.py keeps that marker true). Only the standard library and
pytest are used.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
# the product's folders and the packages they install as (setup.py's FOLDERS)
PACKAGES = {f: f"edgert.{f}" for f in ("export", "quantize", "runtime", "apps")}
MARK = "not subprocess and not gpu"
# pytest options that take a value as the next word (so the value is not read as a path)
VALUED = {"-k", "-m", "-p", "-o", "-W", "-c", "--deselect", "--durations", "--maxfail", "--tb"}
VALUED |= {"--log-level", "--basetemp", "--rootdir", "--confcutdir", "--ignore", "--timeout"}


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def touched() -> tuple[str, list[str]]:
    """(what they were compared with, the touched files that exist, relative to the root)."""
    base = (_git("merge-base", "HEAD", "origin/main") or "").strip()
    against = f"origin/main (merge-base {base[:10]})" if base else "HEAD"
    base = base or "HEAD"
    changed = (_git("diff", "--name-only", base, "--") or "").split()
    changed += (_git("ls-files", "--others", "--exclude-standard") or "").split()
    return against, sorted({f for f in changed if (ROOT / f).is_file()})


def module_of(rel: str) -> str | None:
    """The dotted module of a .py file under a product folder or tests/ (None elsewhere)."""
    parts = list(Path(rel).with_suffix("").parts)
    if not rel.endswith(".py") or not parts or parts[0] not in (*PACKAGES, "tests"):
        return None
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGES.get(parts[0], parts[0]), *parts[1:]])


def _imports(path: Path, module: str) -> set:
    """What a file imports: ("module", name) and ("from", package, name) entries."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(("module", a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            out.add(("module", base))
            out.update(("from", base, a.name) for a in node.names)
    return out


def _names(path: Path) -> set:
    """The names a module defines at its top level (a package may re-export them)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _uses(imports: set, module: str, names: set) -> bool:
    for entry in imports:
        if entry[0] == "module":
            if entry[1] == module or entry[1].startswith(module + "."):
                return True
        else:
            _, package, name = entry
            if f"{package}.{name}" == module or package == module:
                return True
            if module.startswith(package + ".") and name in names:  # a re-exported name
                return True
    return False


def mirrors(rel: str) -> list[Path]:
    """tests/TOP/[SUB/]test_STEM[_*].py for TOP/[SUB/]STEM.py, and tests/TOP/test_SUB_STEM[_*].py
    (STEM: the package's name for its __init__.py)."""
    parts = list(Path(rel).with_suffix("").parts)
    top, mid, stem = parts[0], parts[1:-1], parts[-1]
    if stem == "__init__":
        if not mid:
            return []
        stem, mid = mid[-1], mid[:-1]
    folder = TESTS / top
    names = [f"test_{stem}"] + (
        [f"{'/'.join(mid)}/test_{stem}", f"test_{mid[-1]}_{stem}"] if mid else []
    )
    return sorted({p for n in names for g in (f"{n}.py", f"{n}_*.py") for p in folder.glob(g)})


def pick(files: list[str]) -> tuple[dict, list[str]]:
    """({test file: [reasons]}, [files no test matched])."""
    test_files = sorted(p for p in TESTS.rglob("test_*.py"))
    helpers = sorted(p for p in TESTS.rglob("*.py") if not p.name.startswith("test_"))
    index = {p: _imports(p, module_of(str(p.relative_to(ROOT)))) for p in test_files + helpers}
    text = {p: p.read_text(encoding="utf-8", errors="replace") for p in test_files}
    picked: dict = {}
    unmatched = []

    def add(path: Path, why: str) -> None:
        picked.setdefault(str(path.relative_to(ROOT)), []).append(why)

    for rel in files:
        path = ROOT / rel
        found = False
        if path.name.startswith("test_") and path.suffix == ".py" and TESTS in path.parents:
            add(path, "changed")
            continue
        if path.name in ("conftest.py", "__init__.py") and path.parent == TESTS:
            add(TESTS, f"{rel} is shared by every test")
            continue
        module = module_of(rel)
        if module is not None:
            helper = rel.startswith("tests/")  # tests/markers.py -> tests/test_markers.py
            for p in [path.parent / f"test_{path.stem}.py"] if helper else mirrors(rel):
                if p.is_file():
                    add(p, f"mirrors {rel}")
                    found = True
            # tests that import it, or import a helper module in tests/ that does
            modules, names, seen = [module], {module: _names(path)}, set()
            while modules:
                m = modules.pop()
                for p, imports in index.items():
                    if p in seen or not _uses(imports, m, names.get(m, set())):
                        continue
                    seen.add(p)
                    if p.name.startswith("test_"):
                        add(
                            p,
                            f"imports {m}"
                            if m == module
                            else f"imports {m} (which imports {module})",
                        )
                        found = True
                    else:
                        modules.append(module_of(str(p.relative_to(ROOT))))
            for p in test_files:  # named in a string: a -c program, a monkeypatch target...
                if p not in seen and re.search(re.escape(module) + r"(?![\w.])", text[p]):
                    add(p, f"names {module}")
                    found = True
        else:  # a data file, a page...: tests that name it
            for p in test_files:
                if path.name in text[p]:
                    add(p, f"names {path.name}")
                    found = True
        if not found:
            top = Path(rel).parts[0]
            if top in PACKAGES and (TESTS / top).is_dir():
                add(TESTS / top, f"nothing matched {rel}: its package's tests")
            else:
                unmatched.append(rel)
    return picked, unmatched


def split(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(files to map, pytest selections such as tests/x.py::test_y, pytest options)."""
    files, selections, options = [], [], []
    words = iter(argv)
    for word in words:
        if word == "--":
            options += list(words)
        elif word.startswith("-"):
            options.append(word)
            if word in VALUED:
                options.append(next(words, ""))
        elif "::" in word:
            selections.append(word)
        elif (Path.cwd() / word).is_dir():
            folder = (Path.cwd() / word).resolve()
            if folder == TESTS or TESTS in folder.parents:
                selections.append(word)
            else:  # a product folder: each of its files
                files += [str(p.relative_to(ROOT)) for p in sorted(folder.rglob("*.py"))]
        elif (Path.cwd() / word).is_file():
            files.append(str((Path.cwd() / word).resolve().relative_to(ROOT)))
        else:
            options.append(word)
    return files, selections, options


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    files, selections, options = split(argv)
    if files or selections:
        print(f"test-quick: the files named ({len(files) + len(selections)})")
    else:
        against, files = touched()
        print(f"test-quick: {len(files)} file(s) touched against {against}, uncommitted included")
        if not files:
            print(
                'nothing touched: name files (make test-quick ARGS=runtime/engine.py), or run -m "not subprocess"'
            )
            return 0
    picked, unmatched = pick(files)
    for sel in selections:
        picked.setdefault(sel, []).append("named")
    for rel in unmatched:
        print(f"  {rel}: no tests")
    if not picked:
        print("no tests picked")
        return 0
    for path, why in sorted(picked.items()):
        print(f"  {path}  ({'; '.join(dict.fromkeys(why))})")
    folders = [ROOT / p for p in picked if (ROOT / p).is_dir()]
    paths = [p for p in sorted(picked) if not any(f in (ROOT / p).parents for f in folders)]
    args = ["-q", "-m", MARK, *paths, *options]  # a -m in options wins: it comes last
    print("pytest " + " ".join(f'"{a}"' if " " in a else a for a in args), flush=True)
    import pytest

    code = pytest.main(args)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED:
        if "-m" not in options:
            print(f'every picked test is left out by -m "{MARK}": `make test` runs them')
        return 0
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
