"""export_model: MODEL -> checked ONNX -> parity against PyTorch -> bundle folder (atomically)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from edgert.runtime import atomic, bundle
from edgert.runtime.backends.tensorrt_compat import opset_note
from edgert.runtime.errors import (
    ModelError,
    OutputError,
    ParityError,
    first_line,
    require,
)
from edgert.runtime.tasks import TASK_SPECS, check_task_outputs, task_spec

from . import onnx_export
from .describe import check_fit, check_head_labels, check_labels, describe, parse_size
from .embed import cut_onnx, cut_torch, section
from .parity import ParityReport, random_inputs, run_cases, uniform_inputs
from .source import SourceModel, load_source
from .text_tower import TextTowerArgs, text_files

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 32
PARITY_BATCH = 3  # dynamic-batch parity runs at batch >= 3 as well as 1


@dataclass(frozen=True)
class ExportResult:
    bundle: Path
    parity: ParityReport
    seconds: float
    manifest: dict


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ModelError(f"input shape {text!r} is not of the form 1x3x224x224") from None
    if not dims or any(d <= 0 for d in dims):
        raise ModelError(f"input shape {text!r} must have positive dimensions")
    return dims


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """'1x3x224x224' or, for several inputs, '1x3x224x224,1x10'."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if len(parts) > 1 and all(part.isdigit() for part in parts):
        raise ModelError(
            f"input shape {text!r}: write the dimensions with 'x' ({'x'.join(parts)}); commas "
            "separate the shapes of several inputs"
        )
    return [parse_shape(part) for part in parts]


def export_model(
    model: str | Path | Any,
    out: str | Path | None = None,
    *,
    name: str | None = None,
    input_shape: str | list[tuple[int, ...]] | None = None,
    dynamic_batch: bool = False,
    max_batch: int | None = None,
    opset: int = onnx_export.DEFAULT_OPSET,
    weights: str | None = None,
    simplify: bool = True,
    trust_pickle: bool = False,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    task: str | None = None,
    labels: str | Path | None = None,
    preprocess: dict | None = None,
    allow_trace_warnings: bool = False,
    keypoints: str | None = None,
    embed_layer: str | None = None,
    text_tower: TextTowerArgs | None = None,
    uint8_input: bool = False,
) -> ExportResult:
    """Export MODEL to a bundle folder and return its path with the parity report. Nothing is
    written unless every step (export, checks, parity) succeeds. ``task``, ``labels`` (a file),
    ``preprocess`` (docs/bundle.md), ``keypoints`` (a pose model's "KxD") and ``embed_layer``
    (:mod:`.embed`) describe models that bring no description of their own (an Ultralytics ONNX
    does: the options win, each difference said in ``export.described``). A model whose tracing
    fixes data-dependent control flow is refused unless ``allow_trace_warnings``. ``text_tower``:
    a CLIP-style text tower and its tokenizer beside an encoder (:mod:`.text_tower`).
    ``uint8_input``: the model takes uint8 pixels and normalises them in its graph
    (:mod:`.uint8_input`)."""
    start = time.perf_counter()
    from .zoo import zoo_exporter

    own = zoo_exporter(model)  # e.g. zoo:mtcnn, three networks in one bundle
    if own is not None:
        if uint8_input:
            raise ModelError(f"--uint8-input takes a model of one image input; {model} has several")
        path, parity = own(out, atol, rtol)
        manifest = bundle.Bundle(path).manifest.raw
        return ExportResult(path, parity, time.perf_counter() - start, manifest)
    if max_batch is not None:
        if max_batch < 1:
            raise ModelError("--max-batch must be at least 1")
        dynamic_batch = True
    size = (preprocess or {}).get("size")
    src = load_source(
        model,
        weights=weights,
        trust_pickle=trust_pickle,
        size=parse_size(size) if size is not None else None,
        opset=opset,
    )
    name = name or src.name
    task, src = _as_encoder(src, task, embed_layer)
    target = Path(out) if out else Path(f"{name}.edgert")
    _check_target(target)
    if src.kind == "onnx":
        if input_shape:
            raise ModelError(
                "--input-shape applies to PyTorch models; an ONNX file keeps its own shapes"
            )
        onnx_model, parity, export_info = _from_onnx(src, atol, rtol, embed_layer)
    else:
        onnx_model, parity, export_info = _from_torch(
            src,
            _input_shapes(src, input_shape),
            opset,
            dynamic_batch,
            max_batch or DEFAULT_MAX_BATCH,
            simplify,
            atol,
            rtol,
            allow_trace_warnings,
        )
    _check_parity(parity, atol, rtol)
    export_info["seconds"] = round(time.perf_counter() - start, 3)
    output_specs = onnx_export.tensor_specs(onnx_model.graph.output, onnx_model)
    input_specs = onnx_export.tensor_specs(onnx_model.graph.input, onnx_model)
    notes = describe(
        src,
        input_specs,
        task,
        labels,
        preprocess,
        outputs=output_specs,
        keypoints=keypoints,
    )
    note = opset_note(export_info.get("opset"))  # JetPack 5's TensorRT parses up to 17
    notes = [*notes, note] if note else notes
    export_info["described"] = [src.read_from, *notes] if src.read_from else notes
    given = {"task": task, "labels": labels, "keypoints": keypoints, **(preprocess or {})}
    _check_description(src, input_specs, output_specs, given)
    if uint8_input:
        onnx_model, export_info["uint8_input"] = _fold(onnx_model, src, atol, rtol)
    manifest = _manifest(src, name, onnx_model, parity, export_info)
    _set_metadata(onnx_model, manifest)
    data = onnx_model.SerializeToString()
    manifest["hashes"]["model.onnx"] = bundle.sha256_bytes(data)
    extra = _text_tower(text_tower, manifest)
    with atomic.staged_directory(target) as stage:
        atomic.write_bytes(stage / bundle.MODEL, data)
        for file, content in extra.items():
            atomic.write_bytes(stage / file, content)
        bundle.write_manifest(stage, manifest)
        (stage / bundle.ENGINES).mkdir()
    seconds = time.perf_counter() - start
    log.info("exported %s to %s in %.1f s", src.spec, target, seconds)
    return ExportResult(target, parity, seconds, manifest)


def _check_parity(parity: ParityReport, atol: float, rtol: float) -> None:
    """ParityError, with the worst output's numbers, unless every case passed."""
    worst = parity.worst_failure
    if worst is None:
        return
    raise ParityError(
        f"ONNX output {worst.name} differs from PyTorch beyond tolerance: max abs error "
        f"{worst.max_abs:.3e} (atol {atol:g}), max rel error {worst.max_rel:.3e} (rtol {rtol:g}), "
        f"cosine {worst.cosine:.6f}; nothing was written",
        report=parity,
    )


def _fold(onnx_model, src: SourceModel, atol: float, rtol: float):
    """(the model taking uint8 pixels, its export record); ``src`` gets its preprocessing."""
    from .uint8_input import check_folded, fold_normalisation, folded_preprocessing

    pre = src.preprocessing
    folded = onnx_export.check_onnx(fold_normalisation(onnx_model, pre))
    report = check_folded(onnx_model, folded, pre, atol, rtol)
    src.preprocessing = folded_preprocessing(pre)
    what = {"scale": pre.scale, "mean": list(pre.mean), "std": list(pre.std), "dtype": pre.dtype}
    return folded, {"folded": what, "parity": report.to_dict()}


def _input_shapes(src: SourceModel, input_shape) -> list:
    """The input shapes of a PyTorch export: ``input_shape`` (a list, one tuple, or text), else
    the source's own; ModelError when neither gives one."""
    shapes = input_shape if isinstance(input_shape, list) else None
    if isinstance(input_shape, tuple) and all(isinstance(d, int) for d in input_shape):
        shapes = [input_shape]  # export_model(net, input_shape=(1, 3, 224, 224))
    if isinstance(input_shape, str):
        shapes = parse_shapes(input_shape)
    shapes = shapes or src.input_shapes
    if not shapes:
        raise ModelError(
            f"--input-shape is required for {src.kind} models (e.g. --input-shape 1x3x224x224)"
        )
    return shapes


def _text_tower(given: TextTowerArgs | None, manifest: dict) -> dict:
    """The files of the text tower (``--text-tower``) beside an encoder, its manifest section
    and hashes added to ``manifest``; {} without one."""
    if given is None:
        return {}
    size = (manifest.get("embedding") or {}).get("size")
    if not task_spec(manifest["task"]).vectors or not isinstance(size, int) or size < 1:
        raise ModelError(
            "--text-tower goes beside an image tower of a fixed vector size (--task embed)"
        )
    files, text = text_files(given, size)
    manifest["text"] = text
    for file, content in files.items():
        manifest["hashes"][file] = bundle.sha256_bytes(content)
    return files


def _as_encoder(src: SourceModel, task: str | None, layer: str | None):
    """(task, source) of an export with ``--embed-layer``: embed, and a PyTorch model cut at that
    module (an ONNX graph is cut once loaded, in :func:`_from_onnx`)."""
    if layer is None:
        return task, src
    if not layer.strip():
        raise ModelError("--embed-layer names a layer; it is empty")
    if task is not None and not task_spec(task).vectors:
        raise ModelError(
            f"--embed-layer cuts the model into an encoder (--task embed), not a {task} model"
        )
    return "embed", src if src.kind == "onnx" else cut_torch(src, layer)


def _check_description(src: SourceModel, inputs: list, outputs: list, given: dict) -> None:
    """The description against the graph, before anything is written: a classifier's labels,
    a YOLO head's classes, the task's outputs, then everything the runtime checks when it opens
    the bundle (``given``: the options, None where not given)."""
    check_labels(src.task, src.labels, outputs)
    check_head_labels(src, outputs)
    check_task_outputs(src.task, outputs)
    check_fit(src, inputs, outputs, given)


def _check_target(target: Path) -> None:
    if (
        target.exists()
        and not bundle.is_bundle(target)
        and (target.is_file() or any(target.iterdir()))
    ):
        raise OutputError(f"{target} exists and is not an edgert bundle; refusing to replace it")


def _from_torch(
    src, shapes, opset, dynamic_batch, max_batch, simplify, atol, rtol, allow_trace_warnings=False
):
    torch = require("torch", "pip install 'edgert[export]'", "exporting a PyTorch model")
    names = src.input_names if src.input_names and len(src.input_names) == len(shapes) else None
    names = names or (["input"] if len(shapes) == 1 else [f"input_{i}" for i in range(len(shapes))])
    model = onnx_export.torch_to_onnx(
        torch,
        src.module,
        shapes,
        names,
        src.output_names,
        opset,
        dynamic_batch,
        allow_trace_warnings=allow_trace_warnings,
    )
    info = {"opset": opset, "dynamic_batch": dynamic_batch, "exporter": "torch.onnx (TorchScript)"}
    if simplify:
        model, info["simplify"] = onnx_export.simplify(model)
    else:
        info["simplify"] = {"applied": False, "reason": "--no-simplify"}
    if dynamic_batch:
        info["batch"] = {"min": 1, "opt": 1, "max": max_batch}
    session = onnx_export.cpu_session(model)
    output_names = [o.name for o in session.get_outputs()]

    def reference(feeds):
        return onnx_export.run_module(torch, src.module, tuple(torch.from_numpy(f) for f in feeds))

    def candidate(feeds):
        return session.run(output_names, dict(zip(names, feeds, strict=True)))

    first = 1 if dynamic_batch else shapes[0][0]
    cases = [(f"random, batch {first}", random_inputs(shapes, first, seed=1))]
    if dynamic_batch:
        batch = min(max(PARITY_BATCH, shapes[0][0]), max_batch)
        cases.append((f"random, batch {batch}", random_inputs(shapes, batch, seed=2)))
    # other input distributions, so a step that depends on the data (a branch, a clamp) taken
    # one way by the example is seen taken the other way too
    base = cases[0][1]
    cases.append((f"random negated, batch {first}", [-x for x in base]))
    cases.append((f"uniform [0, 1), batch {first}", uniform_inputs(shapes, first, seed=3)))
    if src.samples is not None and len(shapes) == 1:
        cases += _real_cases(src.samples, shapes[0], dynamic_batch, max_batch)
    report = run_cases(reference, candidate, output_names, cases, atol, rtol)
    return model, report, info


def _real_cases(samples: np.ndarray, shape: tuple[int, ...], dynamic: bool, max_batch: int):
    if tuple(samples.shape[1:]) != tuple(shape[1:]):
        return []  # the user chose another input size than the zoo's recorded preprocessing
    if dynamic:
        batch = samples[: min(len(samples), max_batch, 16)]
        return [(f"real images, batch {len(batch)}", [batch])]
    b = shape[0]
    groups = [samples[i : i + b] for i in range(0, min(len(samples), 8 * b), b)]
    return [(f"real images #{i}", [g]) for i, g in enumerate(groups) if len(g) == b]


def _from_onnx(src: SourceModel, atol: float, rtol: float, embed_layer: str | None = None):
    import onnx

    try:
        model = onnx.load(str(src.onnx_path))
    except Exception as exc:
        raise ModelError(f"{src.onnx_path} cannot be loaded: {first_line(exc)}") from exc
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    newest = onnx.defs.onnx_opset_version()
    if opset is not None and opset > newest:
        raise ModelError(
            f"{src.onnx_path} uses opset {opset}, newer than the {newest} this onnx package knows; "
            f"export it again with an older opset ({onnx_export.DEFAULT_OPSET} for TensorRT 8.5 / "
            "JetPack 5)"
        )
    if embed_layer:  # an encoder: the graph cut at that tensor (the source's labels name no class)
        model, src.labels = cut_onnx(model, embed_layer), None
        src.metrics = {**src.metrics, "embed_layer": embed_layer}
    model = onnx_export.check_onnx(model)
    session = onnx_export.cpu_session(model)  # proves ONNX Runtime can run it
    info = {
        "opset": opset,
        "dynamic_batch": any(
            d < 0 for d in onnx_export.tensor_specs(model.graph.input, model)[0].shape[:1]
        ),
        "exporter": "existing ONNX file",
        "ort_providers": session.get_providers(),
    }
    report = src.parity or ParityReport(
        atol, rtol, (), skipped="the source is ONNX: there is no PyTorch reference"
    )
    src.hashes["source"] = bundle.sha256_file(src.onnx_path)
    return model, report, info


def _manifest(src: SourceModel, name: str, model, parity: ParityReport, export_info: dict) -> dict:
    labels = src.labels
    task = src.task
    return {
        "format": bundle.FORMAT,
        "name": name,
        "task": task,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "inputs": [s.to_dict() for s in onnx_export.tensor_specs(model.graph.input, model)],
        "outputs": [s.to_dict() for s in onnx_export.tensor_specs(model.graph.output, model)],
        "preprocessing": src.preprocessing.to_dict() if src.preprocessing else None,
        "labels": list(labels) if labels else None,
        **({"head": src.head.to_dict()} if src.head is not None and TASK_SPECS[task].boxes else {}),
        "source": {"kind": src.kind, "spec": src.spec},
        "hashes": dict(src.hashes),
        "export": export_info,
        "parity": parity.to_dict(),
        "metrics": src.metrics,
        "tools": onnx_export.tool_versions(),
        **section(task, onnx_export.tensor_specs(model.graph.output, model), src.metrics),
    }


def _set_metadata(model, manifest: dict) -> None:
    """The essentials also travel inside model.onnx, for tools that only see the ONNX file."""
    props = {
        "edgert.format": manifest["format"],
        "edgert.name": manifest["name"],
        "edgert.task": manifest["task"],
        "edgert.preprocessing": json.dumps(manifest["preprocessing"]),
        "edgert.labels": json.dumps(manifest["labels"]),
        "edgert.head": json.dumps(manifest.get("head")),
        "edgert.source": json.dumps(manifest["source"]),
    }
    keep = [p for p in model.metadata_props if not p.key.startswith("edgert.")]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for key, value in props.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
