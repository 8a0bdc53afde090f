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

import contextlib
import json
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.backends.plan_cache import PlanCache
from edgert.runtime.bundle import Bundle, TensorSpec
from edgert.runtime.errors import BundleError, OutputError
from edgert.runtime.tasks import TASK_SPECS

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
    label_output = m.outputs[0].name if TASK_SPECS[m.task].class_scores and m.labels else None
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


RECORD = ".edgert-export.json"  # what export-triton wrote into a model folder, with hashes


def _sha256(path: Path) -> str | None:
    import hashlib

    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _recorded(target: Path) -> dict[str, str]:
    """The files an earlier export-triton wrote into ``target`` (relative path -> SHA-256)."""
    try:
        files = json.loads((target / RECORD).read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def _ours(target: Path, rel: str, recorded: dict[str, str]) -> bool:
    """Whether ``target/rel`` is a file we wrote and nobody changed since."""
    path = target / rel
    return path.is_file() and not path.is_symlink() and recorded.get(rel) == _sha256(path)


def export_triton(
    bundle_path: str | Path,
    repo: str | Path,
    engine_key: str | None = None,
    onnx: bool = False,
    max_batch: int | None = None,
    instances: int = 1,
    version: int = 1,
    force: bool = False,
) -> Path:
    """Write the model folder ``repo/NAME`` (config.pbtxt, labels.txt, ``VERSION/model.*``);
    returns it. Only what is ours is written: other versions and the user's files in the folder
    stay. A file in the way that edgert did not write (or that was changed since) is refused
    unless ``force``; files edgert wrote earlier and no longer writes are removed."""
    bundle = Bundle(bundle_path)
    if instances < 1:
        raise BundleError("--instances must be at least 1")
    if version < 1:
        raise BundleError(
            "--version must be 1 or more (Triton's version folders are numbered from 1)"
        )
    if engine_key and onnx:
        raise BundleError("choose --engine KEY or --onnx, not both")
    if engine_key:
        matches = [p for p, _, _ in PlanCache(bundle.engines_dir).entries() if engine_key in p.name]
        if len(matches) != 1:
            have = (
                ", ".join(p.name for p, _, _ in PlanCache(bundle.engines_dir).entries()) or "none"
            )
            raise BundleError(
                f"--engine {engine_key} matches {len(matches)} plans in {bundle.engines_dir} (have: {have})"
            )
        source, filename, platform, kind = matches[0], "model.plan", "tensorrt_plan", "KIND_GPU"
    else:
        source, filename, platform, kind = bundle.onnx_path, "model.onnx", "onnxruntime_onnx", None
    dynamic = bool(bundle.manifest.inputs) and bundle.manifest.inputs[0].shape[0] < 0
    recorded_batch = bundle.manifest.max_batch
    if max_batch is None:
        max_batch = (recorded_batch or 8) if dynamic else 0
    if max_batch < 0:
        raise BundleError("--max-batch must be 0 (no batching) or more")
    if recorded_batch and max_batch > recorded_batch:
        raise BundleError(
            f"--max-batch {max_batch} exceeds the bundle's maximum batch {recorded_batch}"
        )
    text = config_text(bundle, platform, max_batch, instances, kind)
    repo_dir = Path(repo).absolute()
    target = repo_dir / bundle.manifest.name  # a safe name: the manifest's names are validated
    for folder in (target, target / str(version)):  # a symlink pointing out of --repo
        inside = repo_dir.resolve() in folder.resolve().parents
        if folder.is_symlink() or (folder.exists() and not inside):
            raise BundleError(
                f"the model folder {folder} is a link or lies outside {repo_dir}; not writing through it"
            )
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target} is a file, not a model folder")
    labels = bundle.manifest.labels if TASK_SPECS[bundle.manifest.task].class_scores else None
    # the model first, config.pbtxt last (Triton loads nothing half-written), and the record
    # updated after each file, so a failed export leaves files that are still known to be ours
    writes = {f"{version}/{filename}": source}
    if labels:
        writes["labels.txt"] = ("\n".join(labels) + "\n").encode()
    writes["config.pbtxt"] = text.encode()
    recorded = _recorded(target)
    in_the_way = [rel for rel in writes if (target / rel).exists() or (target / rel).is_symlink()]
    foreign = [rel for rel in in_the_way if not _ours(target, rel, recorded)]
    if foreign and not force:
        raise OutputError(
            f"{target / foreign[0]} is not a file edgert export-triton wrote (or it was changed "
            "since); pass --force to replace it (other files and versions are left alone)"
        )
    # ours from an earlier export that this one replaces (labels.txt, VERSION/model.onnx when
    # VERSION/model.plan is written now); other version folders of ours stay
    stale = [
        rel
        for rel in recorded
        if rel not in writes
        and _ours(target, rel, recorded)
        and ("/" not in rel or rel.startswith(f"{version}/"))
    ]
    record = {rel: h for rel, h in recorded.items() if _ours(target, rel, recorded)}
    for rel, data in writes.items():
        if isinstance(data, Path):
            atomic.copy_file(data, target / rel)
        else:
            atomic.write_bytes(target / rel, data)
        record[rel] = _sha256(target / rel) or ""
        atomic.write_text(target / RECORD, json.dumps({"files": record}, indent=2) + "\n")
    for rel in stale:
        with contextlib.suppress(OSError):
            (target / rel).unlink()
        record.pop(rel, None)
    atomic.write_text(target / RECORD, json.dumps({"files": record}, indent=2) + "\n")
    return target


def other_versions(target: Path, version: int) -> list[int]:
    """Version folders in ``target`` besides ``version`` (Triton serves the latest by default)."""
    return sorted(
        int(p.name)
        for p in target.iterdir()
        if p.is_dir() and p.name.isdigit() and int(p.name) != version
    )
