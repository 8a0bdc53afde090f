"""``edgert build``: orchestration over a table of recipes, then the TensorRT plan.

    report = build("mobilenet_v2.edgert", precision="int8")

Each precision has its recipe: INT8 and FP8 are one Q/DQ recipe with a format record
(:mod:`recipe_qdq`), FP16 its own (:mod:`recipe_fp16`); a task whose bundle is several networks
brings its own table (``TASK_RECIPES``: the face detector's INT8, :func:`faces.build_int8`). A
recipe reads the bundle, stages its files in the job's report (:mod:`job`), and the build commits
files and manifest as one change (:mod:`staging`). Then,
where TensorRT and a GPU exist, the plan is built (or taken from the cache) and checked against
FP32 on stored samples; elsewhere the report says the plan will be built on the device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from edgert.runtime.bundle import Bundle, is_bundle, sha256_file
from edgert.runtime.errors import ModelError
from edgert.runtime.locks import file_lock
from edgert.runtime.precision import PRECISIONS
from edgert.runtime.tasks import TASK_SPECS

from . import faces, gate, progress, qdq_search, ranges
from .job import BuildReport, Job, rounded
from .recipe_fp16 import build_fp16
from .recipe_qdq import FORMATS, build_qdq
from .staging import commit

# precision -> recipe(job) -> the manifest's quantization section
RECIPES: dict[str, Callable[[Job], dict | None]] = {
    "fp32": lambda job: None,
    "fp16": build_fp16,
    "int8": lambda job: build_qdq(job, FORMATS["int8"]),
    "fp8": lambda job: build_qdq(job, FORMATS["fp8"]),
}
# a task whose bundle is several networks (its spec names a model module of its own) brings its
# own recipes: task -> {precision -> recipe}; the one table in quantize keyed by a task's name
TASK_RECIPES: dict[str, dict[str, Callable[[Job], dict | None]]] = {
    "faces": {"int8": faces.build_int8},
}


def build(
    model: str | Path,
    precision: str = "fp16",
    *,
    calib: str | None = None,
    calib_size: int = 500,
    holdout_size: int = 200,
    calib_method: str | None = None,
    calib_labels: str | None = None,
    prepare: str | tuple[str, ...] = "auto",
    gate_rules: str | dict | None = None,
    dla: int | None = None,
    workspace_gib: float | None = None,
    opt_level: int | None = None,
    shapes: dict | None = None,
    no_engine: bool = False,
    seed: int = 0,
    say: Callable[[str], None] = lambda s: None,
    progress_to: Callable[[str], None] | None = None,
) -> BuildReport:
    """Quantize / convert a bundle (or an .onnx, wrapped into a bundle first) and build its plan.
    ``say`` gets the steps' results; ``progress_to`` (the CLI: standard error) where a long step
    is, with n/N and the time left, after each ``EDGERT_PROGRESS_SECONDS`` (10) without output."""
    with progress.reporting(progress_to):
        return _build(
            model,
            precision,
            calib,
            calib_size,
            holdout_size,
            calib_method,
            calib_labels,
            prepare,
            gate_rules,
            dla,
            workspace_gib,
            opt_level,
            shapes,
            no_engine,
            seed,
            progress.said(say),
        )


def _build(
    model, precision, calib, calib_size, holdout_size, calib_method, calib_labels, prepare,
    gate_rules, dla, workspace_gib, opt_level, shapes, no_engine, seed, say,
) -> BuildReport:  # fmt: skip
    start = time.perf_counter()
    if precision not in PRECISIONS:
        raise ModelError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if calib_method and calib_method not in ranges.METHODS:
        raise ModelError(
            f"unknown --calib-method {calib_method!r}; choose one of {', '.join(ranges.METHODS)}"
        )
    if opt_level is not None and not 0 <= opt_level <= 5:
        raise ModelError("--opt-level must be between 0 and 5")
    if workspace_gib is not None and workspace_gib <= 0:
        raise ModelError("--workspace must be a positive number of GiB")
    if dla is not None:
        from edgert.runtime.backends.tensorrt_compat import dla_refusal
        from edgert.runtime.device import jetson_info

        refusal = dla_refusal(precision, dla)  # before calibrating, not after
        if refusal:
            raise ModelError(refusal)
        if jetson_info() is None:
            raise ModelError(
                f"--dla {dla}: this machine has no DLA (DLA cores exist on Jetson Xavier and Orin)"
            )
    rules = gate_rules if isinstance(gate_rules, dict) else _parse_gate(gate_rules)
    preparations = _preparations(prepare)
    path = _as_bundle(Path(model), say)
    with file_lock(path / ".build.lock"):
        bundle = Bundle(path)
        job = Job(
            bundle,
            dict(bundle.manifest.raw),
            BuildReport(path, precision),
            rules,
            say,
            calib,
            calib_size,
            holdout_size,
            calib_method,
            seed,
            preparations,
            calib_labels,
        )
        task = TASK_SPECS[bundle.manifest.task]
        if calib_labels and not task.decodes_boxes:
            raise ModelError(
                f"--calib-labels gives boxes for a detector's gate; a {task.kind} bundle "
                f"({task.description}) has no boxes to compare with them"
            )
        if calib_labels and precision == "fp32":
            raise ModelError("--calib-labels is for a gated build: fp32 is not gated")
        recipes = TASK_RECIPES.get(task.name, RECIPES)
        if precision not in recipes:
            made = [p for p in recipes if p != "fp32"]
            raise ModelError(
                f"--precision {precision} is not built for a {task.kind} bundle "
                f"({task.description}); {' or '.join(p.upper() for p in made)} "
                f"{'is' if len(made) == 1 else 'are'}: edgert build --precision {made[0]}"
            )
        job.report.quantization = recipes[precision](job)
        commit(bundle.path, job.manifest, job.report.pending)
        if task.plan:
            job.report.engine = {"built": False, "reason": task.plan}
            say(f"no TensorRT plan: {task.plan}")
        elif no_engine:
            job.report.engine = {"built": False, "reason": "--no-engine"}
        else:
            from edgert.runtime.backends.tensorrt_plan import BuildOptions

            inputs = bundle.manifest.inputs
            first = inputs[0].name if inputs else None  # an unnamed --shapes profile's input
            options = BuildOptions.from_request(
                precision, workspace_gib, opt_level, shapes, dla, first
            )
            job.report.engine = _plan(bundle.path, precision, rules, options, say)
    job.report.seconds = time.perf_counter() - start
    return job.report


def _preparations(prepare: str | tuple[str, ...]) -> tuple[str, ...]:
    """``auto``: the four fast preparations, the best kept; else the named ones (``none``,
    ``equalize``, ``bias``, ``equalize+bias``, ``adaround``, ``equalize+adaround``,
    ``equalize+bias+adaround``, ``shift+bias``, ``equalize+shift+bias``; comma-separated text
    or a tuple)."""
    if prepare == "auto":
        return qdq_search.PREPARATIONS
    names = (
        tuple(p.strip() for p in prepare.split(",")) if isinstance(prepare, str) else tuple(prepare)
    )
    known = qdq_search.ALL_PREPARATIONS
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ModelError(
            f"unknown --prepare {bad[0] if bad else prepare!r}; choose auto or from "
            + ", ".join(known)
        )
    return names


def _parse_gate(text):
    try:
        return gate.parse_gate(text)
    except ValueError as exc:
        raise ModelError(str(exc)) from None


def _as_bundle(path: Path, say) -> Path:
    if path.is_dir():
        if not is_bundle(path):
            raise ModelError(f"{path} is not an edgert bundle (no edgert manifest.json)")
        return path
    if path.suffix.lower() == ".onnx" and path.is_file():
        from edgert.export import export_model

        target = path.with_suffix(".edgert")
        if is_bundle(target):
            source = Bundle(target).manifest.hashes.get("source")
            if source is not None and source == sha256_file(path):
                say(f"using the bundle {target} (wrapped from this unchanged {path.name})")
                return target
        say(f"wrapping {path} into the bundle {target}")
        return export_model(str(path), target).bundle
    raise ModelError(f"{path} is neither a bundle folder nor an .onnx file")


def _plan(bundle_path, precision: str, rules: dict, options, say) -> dict:
    """The TensorRT plan (from the cache, or built now) checked against FP32 on the stored
    samples; or why it is not built here."""
    from edgert.runtime.backends.tensorrt import TensorRTBackend

    why_not = TensorRTBackend.availability()
    if why_not:
        say(
            f"TensorRT plan not built here ({why_not}); on the device run: edgert build {bundle_path} --precision {precision}"
        )
        return {
            "built": False,
            "reason": why_not,
            "on_device": f"edgert build {bundle_path} --precision {precision}",
        }
    from edgert.runtime.backends.plan_cache import ensure_plan
    from edgert.runtime.backends.plan_check import verify_plan

    say(f"building the {precision} TensorRT plan (minutes on a Jetson; TensorRT reports no n/N)")
    with progress.step(f"the {precision} TensorRT plan", 1):
        plan, built, key = ensure_plan(bundle_path, precision, options=options)
    say(f"{'built' if built else 'cached'}: {plan.name}")
    result = {"built": built, "plan": str(plan), "key": key.digest}
    task = gate.Task.of(Bundle(bundle_path).manifest)
    device_rules = {k: v for k, v in rules.items() if k in ("cosine",)}

    def judge(refs: dict, got: dict):  # the build's gate metrics; on the device its cosine rule
        ev = gate.evaluate(refs, got, task)
        return ev.failures(device_rules), ev.summary(), rounded(ev)

    check = verify_plan(Path(bundle_path), plan, judge)
    if check is not None:
        result["verify"] = check.metrics
        say(f"plan {check.summary}")
    return result
