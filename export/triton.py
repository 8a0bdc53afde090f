"""Triton Inference Server model repositories from a bundle.

    DIR/<name>/config.pbtxt
    DIR/<name>/1/model.plan   (a TensorRT plan from the bundle's engine cache)   or
    DIR/<name>/1/model.onnx   (served by Triton's ONNX Runtime backend)
    DIR/<name>/labels.txt     (classification labels, referenced by the output's label_filename)

The config carries platform, inputs/outputs with Triton data types and dims, max_batch_size,
dynamic batching, instance groups, and the bundle's preprocessing as parameters (Triton does not
preprocess; clients and ensembles read them).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.bundle import Bundle, TensorSpec
from edgert.runtime.engine_cache import EngineCache
from edgert.runtime.errors import BundleError, OutputError

TRITON_TYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "float64": "TYPE_FP64",
    "int8": "TYPE_INT8",
    "uint8": "TYPE_UINT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "bool": "TYPE_BOOL",
}


def _dims(spec: TensorSpec, batched: bool) -> list[int]:
    return list(spec.shape[1:] if batched else spec.shape)


def _io(kind: str, specs, batched: bool, label_output: str | None) -> str:
    items = []
    for s in specs:
        if s.dtype not in TRITON_TYPES:
            raise BundleError(f"{kind} {s.name} has dtype {s.dtype}, which Triton has no type for")
        extra = '\n    label_filename: "labels.txt"' if s.name == label_output else ""
        items.append(
            f'  {{\n    name: "{s.name}"\n    data_type: {TRITON_TYPES[s.dtype]}\n'
            f"    dims: [ {', '.join(str(d) for d in _dims(s, batched))} ]{extra}\n  }}"
        )
    return f"{kind} [\n" + ",\n".join(items) + "\n]\n"


def config_text(
    bundle: Bundle, platform: str, max_batch: int, instances: int, kind: str | None
) -> str:
    m = bundle.manifest
    batched = max_batch > 0
    if batched and not all(s.shape and s.shape[0] < 0 for s in (*m.inputs, *m.outputs)):
        raise BundleError("--max-batch needs a dynamic-batch bundle (export with --dynamic-batch)")
    label_output = m.outputs[0].name if m.task == "classify" and m.labels else None
    lines = [f'name: "{m.name}"', f'platform: "{platform}"', f"max_batch_size: {max_batch}"]
    text = "\n".join(lines) + "\n"
    text += _io("input", m.inputs, batched, None)
    text += _io("output", m.outputs, batched, label_output)
    if batched:
        preferred = sorted({b for b in (max_batch // 2, max_batch) if b > 1})
        pref = (
            f"  preferred_batch_size: [ {', '.join(map(str, preferred))} ]\n" if preferred else ""
        )
        text += "dynamic_batching {\n" + pref + "  max_queue_delay_microseconds: 100\n}\n"
    group = f"  {{\n    count: {instances}\n" + (f"    kind: {kind}\n" if kind else "") + "  }\n"
    text += "instance_group [\n" + group + "]\n"
    params = {"edgert.task": m.task, "edgert.format": m.raw.get("format", "")}
    if m.preprocessing:
        params["edgert.preprocessing"] = json.dumps(m.preprocessing.to_dict(), sort_keys=True)
    for key, value in params.items():
        text += (
            f'parameters {{\n  key: "{key}"\n  value: {{ string_value: {json.dumps(value)} }}\n}}\n'
        )
    return text


def export_triton(
    bundle_path: str | Path,
    repo: str | Path,
    engine_key: str | None = None,
    onnx: bool = False,
    max_batch: int | None = None,
    instances: int = 1,
) -> Path:
    """Write the model folder into ``repo``; returns it. Replaces an existing folder of that name."""
    bundle = Bundle(bundle_path)
    if instances < 1:
        raise BundleError("--instances must be at least 1")
    if engine_key and onnx:
        raise BundleError("choose --engine KEY or --onnx, not both")
    if engine_key:
        matches = [
            p for p, _, _ in EngineCache(bundle.engines_dir).entries() if engine_key in p.name
        ]
        if len(matches) != 1:
            have = (
                ", ".join(p.name for p, _, _ in EngineCache(bundle.engines_dir).entries()) or "none"
            )
            raise BundleError(
                f"--engine {engine_key} matches {len(matches)} plans in {bundle.engines_dir} (have: {have})"
            )
        source, filename, platform, kind = matches[0], "model.plan", "tensorrt_plan", "KIND_GPU"
    else:
        source, filename, platform, kind = bundle.onnx_path, "model.onnx", "onnxruntime_onnx", None
    dynamic = bool(bundle.manifest.inputs) and bundle.manifest.inputs[0].shape[0] < 0
    recorded = bundle.manifest.max_batch
    if max_batch is None:
        max_batch = (recorded or 8) if dynamic else 0
    if max_batch < 0:
        raise BundleError("--max-batch must be 0 (no batching) or more")
    if recorded and max_batch > recorded:
        raise BundleError(f"--max-batch {max_batch} exceeds the bundle's maximum batch {recorded}")
    text = config_text(bundle, platform, max_batch, instances, kind)
    repo_dir = Path(repo).absolute()
    target = repo_dir / bundle.manifest.name  # a safe name: the manifest's names are validated
    if target.resolve().parent != repo_dir.resolve():  # a symlink pointing out of --repo
        raise BundleError(f"the model folder {target} would lie outside {repo_dir}")
    with atomic.staged_directory(target) as stage:
        (stage / "1").mkdir()
        try:
            shutil.copyfile(source, stage / "1" / filename)
        except OSError as exc:
            raise OutputError(f"cannot copy {source} into {target}: {exc.strerror}") from exc
        atomic.write_text(stage / "config.pbtxt", text)
        if bundle.manifest.labels and bundle.manifest.task == "classify":
            atomic.write_text(stage / "labels.txt", "\n".join(bundle.manifest.labels) + "\n")
    return target
