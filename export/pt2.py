"""An ExportedProgram (``.pt2``, ``torch.export.save``) loaded without running code from the file.

``torch.export.load`` unpickles parts of the archive: weights and constants whose config says
``use_pickle`` (``torch.load(weights_only=False)``), opaque constants (``pickle.loads``), custom
objects, sample inputs that fail ``weights_only=True`` (torch retries with ``weights_only=False``)
and the whole state of the pre-2.7 format; an AOTInductor package is a shared library it loads.
Each can run code. The archive is read as a zip first (nothing is unpickled) and any of them is
refused unless the user passes ``--trust-pickle``; while an untrusted archive loads, ``torch.load``
is held to ``weights_only=True`` as well, so a path this list misses still cannot unpickle code.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import zipfile
from pathlib import Path

from edgert.runtime.errors import ModelError, first_line

# what one config file may weigh before it is parsed (a real one is a few KB a tensor)
_CONFIG_BYTES = 64 << 20
_GUARD = threading.Lock()


def load_exported_program(torch, path: Path, trust_pickle: bool):
    """``torch.export.load(path)``, refused in one sentence where it would unpickle untrusted."""
    if not trust_pickle:
        found = pickled_parts(torch, path)
        if found:
            raise ModelError(
                f"{path} holds {found[0]}: loading it can run code from the file, so edgert "
                "refuses unless you pass --trust-pickle (or re-save the program with "
                "torch.export.save where you trust it)"
            )
    guard = contextlib.nullcontext() if trust_pickle else _weights_only(torch)
    try:
        with guard:
            return torch.export.load(str(path))
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(
            f"{path} is not a loadable ExportedProgram (.pt2): {first_line(exc)}"
        ) from exc


def pickled_parts(torch, path: Path) -> list:
    """What in the archive ``torch.export.load`` would unpickle or load as code (read as a zip)."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = {_inner(info.filename): info for info in zf.infolist()}
            return _scan(torch, zf, infos)
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError) as exc:
        raise ModelError(f"{path} is not a .pt2 archive: {first_line(exc)}") from None


def _inner(name: str) -> str:
    """A name without the archive's root folder (``net/data/weights/x`` -> ``data/weights/x``);
    a name at the root (the pre-2.7 format's ``version``) as it is."""
    return name.split("/", 1)[1] if "/" in name else "/" + name


def _scan(torch, zf: zipfile.ZipFile, infos: dict) -> list:
    found = []
    if "/version" in infos or "archive_version" not in infos:
        found.append("the older .pt2 format, whose state is one pickle")
    if any(n.startswith(("data/aotinductor/", "data/executorch/", "data/mtia")) for n in infos):
        found.append("compiled AOTInductor code (a shared library)")
    for name, info in infos.items():
        if name.startswith("data/weights/") and name.endswith("_weights_config.json"):
            for fqn, meta in _config(zf, info).items():
                if meta.get("use_pickle"):
                    found.append(f"a pickled weight ({fqn[:80]})")
        elif name.startswith("data/constants/") and name.endswith("_constants_config.json"):
            for fqn, meta in _config(zf, info).items():
                kind = str(meta.get("path_name", ""))
                if meta.get("use_pickle") or not kind.startswith("tensor_"):
                    found.append(f"a pickled constant ({fqn[:80]})")
        elif name.startswith("data/constants/") and name.endswith(".pt"):
            found.append("a pickled constant file (the older layout)")
        elif name.startswith("data/sample_inputs/") and not _loads_weights_only(torch, zf, info):
            found.append("sample inputs that load only as a full pickle")
    return found


def _config(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> dict:
    if info.file_size > _CONFIG_BYTES:
        raise ValueError(f"{info.filename} is {info.file_size} bytes, over {_CONFIG_BYTES}")
    try:
        config = json.loads(zf.read(info).decode("utf-8")).get("config", {})
    except (ValueError, AttributeError, RecursionError):
        raise ValueError(f"{info.filename} is not the JSON torch.export.save writes") from None
    if not isinstance(config, dict) or not all(isinstance(m, dict) for m in config.values()):
        raise ValueError(f"{info.filename} is not the JSON torch.export.save writes")
    return config


def _loads_weights_only(torch, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    try:
        torch.load(io.BytesIO(zf.read(info)), weights_only=True)
    except Exception:  # torch's restricted unpickler refused it: only a full pickle loads it
        return False
    return True


@contextlib.contextmanager
def _weights_only(torch):
    """``torch.load`` held to ``weights_only=True`` (one load at a time: it is torch's attribute)."""
    with _GUARD:
        real = torch.load

        def load(*args, **kwargs):
            kwargs["weights_only"] = True
            return real(*args, **kwargs)

        torch.load = load
        try:
            yield
        finally:
            torch.load = real
