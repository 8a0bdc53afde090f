"""Turn a MODEL argument into a PyTorch module (or an ONNX file) ready for export.

MODEL kinds: ``zoo:NAME``; a factory ``path/to/file.py:build`` or ``package.module:build``; a
TorchScript file; an ExportedProgram ``.pt2`` (one whose archive holds pickles or compiled code only
with ``trust_pickle``: export/pt2.py); a pickled whole module (only with ``trust_pickle``); an
existing ``.onnx`` file.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

from edgert.runtime.bundle import sha256_file
from edgert.runtime.errors import ModelError, first_line
from edgert.runtime.images.preprocess import Preprocessing

from .source_model import SourceModel, check_state_dict

__all__ = ["SourceModel", "check_state_dict", "load_source"]

_FACTORY = re.compile(r"^(?P<target>.+?):(?P<attr>[A-Za-z_][A-Za-z0-9_]*)$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def load_source(
    spec: str | os.PathLike | Any,
    weights: str | None = None,
    trust_pickle: bool = False,
    size: tuple | None = None,
    opset: int = 17,
) -> SourceModel:
    """Resolve MODEL (a CLI string or path, or a ``torch.nn.Module`` from Python); raise
    ModelError with one sentence when it is not a usable model. ``size`` and ``opset``: what an
    Ultralytics checkpoint is exported to ONNX at (its training size where None)."""
    if not isinstance(spec, (str, os.PathLike)):
        return _from_module(spec, weights)
    spec = os.fspath(spec)
    if spec.startswith("zoo:"):
        from .zoo import load_zoo_model

        if weights:
            raise ModelError("--weights does not apply to zoo models, which bring their own")
        return load_zoo_model(spec[4:])
    path = Path(spec)
    if not path.exists():
        match = _FACTORY.match(spec)
        if match and (match["target"].endswith(".py") or _DOTTED.match(match["target"])):
            return _load_factory(spec, match["target"], match["attr"], weights)
        raise ModelError(f"{spec} does not exist (expected a file, zoo:NAME or module:function)")
    if path.is_dir():
        raise ModelError(f"{spec} is a folder, not a model file")
    if weights and path.suffix != ".py":
        raise ModelError(
            "--weights applies only to a Python factory (file.py:build or module:build)"
        )
    if path.suffix.lower() == ".onnx":
        return _load_onnx(path)
    if path.suffix.lower() == ".pt2":
        return _load_exported_program(path, trust_pickle)
    if _is_ultralytics_checkpoint(path):
        return _load_ultralytics(path, trust_pickle, size, opset)
    return _load_torch_file(path, trust_pickle)


def _is_ultralytics_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a torch.save archive whose pickle names Ultralytics' model classes
    (read as bytes: nothing is unpickled)."""
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            pickles = [n for n in zf.namelist() if n.endswith("data.pkl")]
            return any(b"ultralytics.nn" in zf.read(n)[: 1 << 22] for n in pickles[:1])
    except (OSError, zipfile.BadZipFile, RuntimeError):
        return False


def _load_ultralytics(
    path: Path, trust_pickle: bool, size: tuple | None, opset: int
) -> SourceModel:
    """An Ultralytics checkpoint (yolo11n.pt, a user's best.pt) exported to ONNX by Ultralytics'
    own exporter, in a temporary folder, then read as its ONNX (task, labels, size, head from
    the metadata it writes)."""
    import shutil
    import tempfile

    if not trust_pickle:
        raise ModelError(
            f"{path} is an Ultralytics checkpoint, a pickle: loading it can run code from the file; "
            "pass --trust-pickle to have Ultralytics export it to ONNX here (or give the .onnx of "
            "'yolo export model=... format=onnx')"
        )
    try:
        import ultralytics
        from ultralytics import YOLO
    except ImportError:
        raise ModelError(
            f"{path} is an Ultralytics checkpoint and ultralytics is not installed here: export "
            f"it where Ultralytics runs ('yolo export model={path.name} format=onnx opset=17') "
            "and give edgert the .onnx (a plain 'pip install ultralytics' here would bring a "
            "torchvision that replaces this environment's torch unless you pin the torchvision "
            "made for it)"
        ) from None
    folder = tempfile.TemporaryDirectory(prefix="edgert-ultralytics-")
    copy = Path(folder.name) / path.name
    shutil.copyfile(path, copy)
    options = {"format": "onnx", "opset": opset, "simplify": True, "verbose": False}
    if size is not None:
        options["imgsz"] = list(size)
    try:
        onnx_file = Path(YOLO(str(copy)).export(**options))
    except Exception as exc:  # Ultralytics' own load or export: its sentence
        folder.cleanup()
        raise ModelError(f"Ultralytics could not export {path} to ONNX: {first_line(exc)}") from exc
    src = _load_onnx(onnx_file)
    src.name, src.spec, src.keep = _name_of(path), str(path), folder
    src.hashes["checkpoint"] = sha256_file(path)
    src.parity = _checkpoint_parity(YOLO, copy, onnx_file)
    if src.read_from:
        src.read_from += f", exported from {path.name} by Ultralytics {ultralytics.__version__}"
    return src


def _checkpoint_parity(yolo, checkpoint: Path, onnx_file: Path):
    """Ultralytics' predictor on the checkpoint and on its ONNX (export/ultralytics_parity.py),
    or a report saying why it could not run."""
    import onnx

    from .parity import ParityReport
    from .ultralytics_parity import predictor_parity

    dims = onnx.load(str(onnx_file), load_external_data=False).graph.input[0].type.tensor_type
    size = tuple(d.dim_value for d in dims.shape.dim[2:4])
    if len(size) != 2 or min(size) <= 0:
        return ParityReport(0.0, 0.0, (), skipped="the exported ONNX's input size is not fixed")
    try:
        return predictor_parity(yolo, checkpoint, onnx_file, size)
    except Exception as exc:  # Ultralytics' predictor: its own sentence
        return ParityReport(0.0, 0.0, (), skipped=f"Ultralytics' predictor: {first_line(exc)}")


@contextlib.contextmanager
def _cwd_first():
    """The current folder first on sys.path while importing the user's package (the console
    script, unlike ``python -m``, does not put it there)."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _from_module(module: Any, weights: str | None) -> SourceModel:
    """A module handed over from Python (``export_model(net, input_shape=...)``)."""
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise ModelError(
            f"MODEL is a {type(module).__name__}; give a torch.nn.Module, a file, zoo:NAME or "
            "module:function"
        )
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", type(module).__name__).lower() or "model"
    src = SourceModel(
        name=name, kind="module", spec=f"<{type(module).__name__} object>", module=module
    )
    if weights:
        _load_weights(torch, module, Path(weights))
        src.hashes["weights"] = sha256_file(weights)
    return src


def _torch():
    from edgert.runtime.errors import require

    return require("torch", "pip install 'edgert[export]'", "exporting a PyTorch model")


def _name_of(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem) or "model"


def _load_factory(spec: str, target: str, attr: str, weights: str | None) -> SourceModel:
    torch = _torch()
    if target.endswith(".py"):
        file = Path(target)
        if not file.is_file():
            raise ModelError(f"factory file {target} does not exist")
        mod_name = f"_edgert_factory_{abs(hash(str(file.resolve())))}"
        spec_obj = importlib.util.spec_from_file_location(mod_name, file)
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[mod_name] = module
        try:
            spec_obj.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise ModelError(f"importing {target} failed: {type(exc).__name__}: {exc}") from exc
        name = _name_of(file)
    else:
        try:
            with _cwd_first():  # as `python -m` does: mypkg.models:build from the current folder
                module = importlib.import_module(target)
        except Exception as exc:
            raise ModelError(f"cannot import module {target}: {type(exc).__name__}: {exc}") from exc
        name = target.rsplit(".", 1)[-1]
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ModelError(f"{target} has no function named {attr}")
    try:
        model = factory()
    except Exception as exc:
        raise ModelError(f"{spec}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{spec}() returned {type(model).__name__}, not a torch.nn.Module")
    src = SourceModel(name=name, kind="factory", spec=spec, module=model)
    if weights:
        _load_weights(torch, model, Path(weights))
        src.hashes["weights"] = sha256_file(weights)
    return src


def _load_weights(torch, model, path: Path) -> None:
    if not path.is_file():
        raise ModelError(f"weights file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ModelError(
            f"{path} is not a state_dict that loads with weights_only=True "
            f"({type(exc).__name__}: {first_line(exc, 200)})"
        ) from exc
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise ModelError(f"{path} holds a {type(state).__name__}, not a state_dict")
    check_state_dict(model, state, str(path))
    model.load_state_dict(state, strict=True)


def _load_exported_program(path: Path, trust_pickle: bool) -> SourceModel:
    from .pt2 import load_exported_program

    torch = _torch()
    program = load_exported_program(torch, path, trust_pickle)
    shapes = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in program.graph_signature.user_inputs:
            val = node.meta.get("val")
            if val is not None and hasattr(val, "shape"):
                shapes.append(tuple(int(d) if str(d).isdigit() else 1 for d in val.shape))
    return SourceModel(
        name=_name_of(path),
        kind="exported_program",
        spec=str(path),
        module=_ProgramModule(torch, program.module()),
        input_shapes=shapes or None,
        hashes={"source": sha256_file(path)},
    )


def _ProgramModule(torch, graph_module):  # noqa: N802 - builds a module class lazily (torch optional)
    class ProgramModule(torch.nn.Module):
        """Wraps ExportedProgram.module() for the TorchScript-based ONNX exporter.

        Exported graph modules refuse ``train()``, which the exporter calls; they are already in
        inference form, so train() is a no-op here.
        """

        def __init__(self, gm) -> None:
            super().__init__()
            self.program = gm

        def train(self, mode: bool = True):
            return self

        def forward(self, *args):
            return self.program(*args)

    return ProgramModule(graph_module)


def _load_torch_file(path: Path, trust_pickle: bool) -> SourceModel:
    torch = _torch()
    if not zipfile.is_zipfile(path):
        raise ModelError(
            f"{path} is not a model file edgert knows (expected .onnx, .pt2, TorchScript or a "
            "torch.save archive)"
        )
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    hashes = {"source": sha256_file(path)}
    if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        try:
            module = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise ModelError(f"{path} is a corrupt TorchScript file: {first_line(exc)}") from exc
        return SourceModel(_name_of(path), "torchscript", str(path), module=module, hashes=hashes)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        if not trust_pickle:
            raise ModelError(
                f"{path} is a pickled Python object; loading it can run arbitrary code, so edgert "
                "refuses unless you pass --trust-pickle (better: export TorchScript or a factory "
                "with --weights)"
            ) from exc
        obj = _unpickle(torch, path)
        if not isinstance(obj, torch.nn.Module):
            raise ModelError(
                f"{path} unpickles to {type(obj).__name__}, not a torch.nn.Module"
            ) from None
        return SourceModel(_name_of(path), "pickle", str(path), module=obj, hashes=hashes)
    if isinstance(obj, dict):
        raise ModelError(
            f"{path} holds a state_dict (weights only); pass a factory that builds the "
            "architecture, e.g. 'edgert export net.py:build --weights " + str(path) + "'"
        )
    raise ModelError(f"{path} holds a {type(obj).__name__}, not a model")


def _unpickle(torch, path: Path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise ModelError(f"{path} could not be unpickled: {first_line(exc)}") from exc


def _load_onnx(path: Path) -> SourceModel:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ModelError(f"{path} is not a valid ONNX file: {first_line(exc)}") from exc
    if not model.graph.node:
        raise ModelError(f"{path} is not a valid ONNX model: its graph has no nodes")
    src = SourceModel(_name_of(path), "onnx", str(path), onnx_path=path)
    _read_edgert_metadata(model, src)
    props = {p.key: p.value for p in model.metadata_props}
    if "edgert.format" not in props:
        from . import ultralytics

        if ultralytics.is_ultralytics(props):
            outputs = [
                [
                    d.dim_value if d.HasField("dim_value") else -1
                    for d in o.type.tensor_type.shape.dim
                ]
                for o in model.graph.output
            ]
            ultralytics.read(props, outputs, src)
    return src


def _read_edgert_metadata(model, src: SourceModel) -> None:
    """An ONNX file exported by edgert carries its task, preprocessing and labels; keep them
    where they are what a manifest may hold (a file from someone else's machine: each value at
    most what a manifest may be, labels as a manifest's); else describe it with options."""
    import json

    from edgert.runtime.bundle import MAX_MANIFEST_BYTES, valid_labels
    from edgert.runtime.errors import BundleError
    from edgert.runtime.tasks import TASK_SPECS
    from edgert.runtime.tasks.heads import Head

    props = {p.key: p.value for p in model.metadata_props}
    if "edgert.format" not in props:
        return
    try:
        if any(len(v) > MAX_MANIFEST_BYTES for k, v in props.items() if k.startswith("edgert.")):
            raise ValueError("too long")
        task = props.get("edgert.task", src.task)
        if task not in TASK_SPECS:
            raise ValueError(f"unknown task {task!r}")
        pre = json.loads(props.get("edgert.preprocessing", "null"))
        labels = valid_labels(json.loads(props.get("edgert.labels", "null")), "metadata")
        head = json.loads(props.get("edgert.head", "null"))
        src.preprocessing = Preprocessing.from_dict(pre) if pre else None
        src.head = Head.from_dict(head) if head else None
        src.task, src.labels = task, list(labels) if labels else None
    except (ValueError, RecursionError, BundleError):
        src.preprocessing = src.labels = src.head = None  # unreadable: described with options
