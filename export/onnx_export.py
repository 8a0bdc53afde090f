"""PyTorch module -> checked, shape-inferred (and optionally simplified) ONNX model."""

from __future__ import annotations

import contextlib
import io
import logging
import platform
import re
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from edgert.runtime.bundle import MAX_DIM, TensorSpec
from edgert.runtime.errors import ExportError, ShapeError, first_line, require

log = logging.getLogger(__name__)

DEFAULT_OPSET = 17  # the newest opset TensorRT 8.5 (JetPack 5) parses


def example_inputs(torch, shapes: list[tuple[int, ...]], seed: int = 0) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=gen) for shape in shapes)


def run_module(torch, module, inputs: tuple) -> list[np.ndarray]:
    """Run the module on torch inputs, returning its outputs as a flat list of numpy arrays."""
    with torch.no_grad():
        out = module(*inputs)
    return [t.detach().cpu().numpy() for t in flatten_outputs(torch, out)]


def output_keys(out, prefix: str = "") -> list[str] | None:
    """The names a model's dict outputs give (``{"logits": t}`` -> ["logits"], nested dicts and
    lists joined by "_"), one per flattened tensor; None when the outputs are not a dict."""
    if not isinstance(out, dict):
        return None

    def walk(item, name: str) -> list[str]:
        if isinstance(item, dict):
            return [n for k, v in item.items() for n in walk(v, f"{name}_{k}" if name else str(k))]
        if isinstance(item, list | tuple):
            return [n for i, v in enumerate(item) for n in walk(v, f"{name}_{i}")]
        return [name]

    names = walk(out, prefix)
    return names if len(set(names)) == len(names) else None


def flatten_outputs(torch, out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        flat = []
        for item in out:
            flat.extend(flatten_outputs(torch, item))
        return flat
    if isinstance(out, dict):
        return flatten_outputs(torch, list(out.values()))
    raise ExportError(
        f"the model returned {type(out).__name__}; ONNX export needs tensors (or tuples of them)"
    )


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def torch_to_onnx(
    torch,
    module,
    input_shapes: list[tuple[int, ...]],
    input_names: list[str],
    output_names: list[str] | None,
    opset: int = DEFAULT_OPSET,
    dynamic_batch: bool = False,
    dynamic_axes: dict[str, dict[int, str]] | None = None,
    allow_trace_warnings: bool = False,
):
    """Export with the TorchScript-based exporter (it targets opset 17 exactly; the dynamo exporter
    cannot down-convert below 18), then ``onnx.checker`` and shape inference. The tracer's
    warnings (a tensor turned into a Python bool or number: control flow fixed to the example's
    branch) refuse the export unless ``allow_trace_warnings``, which logs them instead."""
    import onnx

    module.eval()
    inputs = example_inputs(torch, input_shapes)
    try:
        with torch.no_grad():
            raw = module(*inputs)
        outputs = [t.detach().cpu().numpy() for t in flatten_outputs(torch, raw)]
    except ExportError:
        raise
    except Exception as exc:
        shapes = ", ".join(shape_text(s) for s in input_shapes)
        raise ShapeError(f"the model rejects input shape {shapes}: {first_line(exc)}") from exc
    if output_names is None or len(output_names) != len(outputs):
        output_names = output_keys(raw) or (
            ["output"] if len(outputs) == 1 else [f"output_{i}" for i in range(len(outputs))]
        )
    for name, value in zip(output_names, outputs, strict=True):  # before exporting, not after
        if value.ndim > 8 or any(d > MAX_DIM for d in value.shape):
            raise ExportError(
                f"output {name} has shape {shape_text(value.shape)}: a bundle takes at most 8 "
                f"dimensions of at most {MAX_DIM} (TensorRT's limit)"
            )
    axes: dict[str, dict[int, str]] = {}
    if dynamic_batch:
        axes = {n: {0: "batch"} for n in [*input_names, *output_names]}
    for name, extra in (dynamic_axes or {}).items():  # e.g. a fully convolutional net's H and W
        axes.setdefault(name, {}).update(extra)
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.onnx.export(
                module,
                inputs,
                buf,
                dynamo=False,
                opset_version=opset,
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=axes or None,
                do_constant_folding=True,
            )
    except Exception as exc:
        raise ExportError(_explain_export_failure(exc, opset)) from exc
    traced = _trace_warnings(torch, caught)
    if traced and not allow_trace_warnings:
        raise ExportError(
            f"the tracer fixed a data-dependent step of the model: {traced[0]}; the ONNX model "
            "would do what this one input did for every input (rewrite it with torch.where, or "
            "pass --allow-trace-warnings if that is what you want)"
        )
    for text in traced:
        log.warning("tracer: %s", text)
    try:
        model = onnx.load_from_string(buf.getvalue())
        onnx.checker.check_model(model, full_check=True)
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False)
    except Exception as exc:
        raise ExportError(f"the exported ONNX model fails onnx.checker: {first_line(exc)}") from exc
    return model


def _trace_warnings(torch, caught) -> list[str]:
    """The tracer's warnings among ``caught`` that point into the model's own code, each with its
    line. Those raised inside PyTorch itself (an ExportedProgram's input guards, shape arithmetic
    in torch.nn.functional) are about shapes it already specialised, not the model's branches."""
    kind = getattr(torch.jit, "TracerWarning", None)
    torch_dir = str(Path(torch.__file__).resolve().parent)
    found = []
    for w in caught:
        if str(Path(w.filename).resolve()).startswith(torch_dir):
            log.debug("tracer (inside PyTorch): %s", first_line(w.message))
            continue
        if kind is not None and issubclass(w.category, kind):
            text = first_line(w.message).split(". ")[0].rstrip(".")
            found.append(f"{text} (at {Path(w.filename).name}:{w.lineno})")
    return list(dict.fromkeys(found))


def check_onnx(model) -> Any:
    """Validate and shape-infer an existing ONNX model; returns the inferred model."""
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False)
    except Exception as exc:
        raise ExportError(f"the ONNX model is invalid: {first_line(exc)}") from exc


def simplify(model) -> tuple[Any, dict]:
    """Run onnxslim; keep its result only when it removes nodes. Never fails the export."""
    before = len(model.graph.node)
    try:
        import onnxslim

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            slim = onnxslim.slim(model)
        if slim is None:
            raise RuntimeError("onnxslim returned nothing")
        check_onnx(slim)
    except Exception as exc:  # noqa: BLE001 - simplification is optional by design
        log.warning("ONNX simplification skipped: %s", first_line(exc))
        return model, {"applied": False, "reason": first_line(exc), "nodes": before}
    after = len(slim.graph.node)
    if after < before:
        return slim, {"applied": True, "nodes_before": before, "nodes": after}
    return model, {"applied": False, "reason": "no nodes removed", "nodes": before}


def _explain_export_failure(exc: Exception, opset: int) -> str:
    text = str(exc)
    op = re.search(r"operator '([\w:.]+)'", text)
    if op:
        added = re.search(r"added in version (\d+)", text)
        if added:
            need = int(added.group(1))
            hint = f"retry with --opset {need}"
            if need > DEFAULT_OPSET:
                hint += f" (TensorRT 8.5 / JetPack 5 parses only up to opset {DEFAULT_OPSET})"
            return f"operator {op.group(1)} cannot be expressed in ONNX opset {opset}; it needs opset {need}: {hint}"
        return (
            f"operator {op.group(1)} has no ONNX equivalent in opset {opset} (nor in newer opsets the "
            "exporter knows); replace it in the model or register a custom symbolic"
        )
    if "Unsupported ONNX opset" in text or "opset_version" in text:
        return f"ONNX opset {opset} is not supported by this PyTorch exporter: {first_line(exc)}"
    return f"ONNX export failed: {type(exc).__name__}: {first_line(exc)}"


def cpu_session(model):
    """An ONNX Runtime CPU session of an in-memory model (proof that it runs); ExportError if not."""
    ort = require("onnxruntime", "pip install onnxruntime", "checking the export")
    try:
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ExportError(
            f"ONNX Runtime cannot load the exported model: {first_line(exc)}"
        ) from exc


def tensor_specs(values, model) -> list[TensorSpec]:
    """Graph inputs or outputs (initializers left out) as TensorSpecs: -1 for dynamic axes."""
    from onnx import helper

    inits = {i.name for i in model.graph.initializer}
    specs = []
    for v in values:
        if v.name in inits:
            continue
        tt = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        specs.append(TensorSpec(v.name, dtype, dims))
    return specs


def tool_versions() -> dict[str, str]:
    """Versions of the tools that made a bundle, for its manifest."""
    versions = {"python": platform.python_version()}
    for dist in ("edgert", "torch", "onnx", "onnxruntime", "onnxslim", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[dist] = metadata.version(dist)
    return versions
