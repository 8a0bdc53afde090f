"""edgert demo: the whole chain on built-in defaults (what `make demo` runs).

zoo MobileNetV2 -> bundle (parity checked) -> INT8 calibrated on the bundled photos and gated ->
engine (TensorRT where present, otherwise ONNX Runtime, saying which) -> the sample photos
classified -> the camera app on synthetic:// headless -> summary and a report (JSON + PNG).
``--faces`` does the same with the MTCNN face detector on photos with faces.
"""

from __future__ import annotations

import json
from pathlib import Path

from edgert.apps.argtypes import BACKENDS, positive_float, positive_int
from edgert.runtime import json_text

# the demo's INT8 recipe: one preparation and one method on a few crops, gated on 150 others
# (about a minute on 2 cores); `edgert build` searches 4 preparations x 4 methods on 500 samples
DEMO_CALIB_SIZE = 64
DEMO_PREPARE = "equalize+bias"
DEMO_METHOD = "percentile"
HOLDOUT_SIZE = 150
EXPORT = {"model": "zoo:mobilenet_v2", "dynamic_batch": True, "max_batch": 8}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole chain on built-in defaults (e.g. edgert demo, edgert demo --faces)",
        description="Export the built-in MobileNetV2, make a calibrated and gated INT8 model, pick the "
        "best engine, classify the sample photos and run the camera app on a synthetic scene. "
        "About 2 minutes on 2 CPU cores, most of it the INT8 calibration and its gate; a second "
        "run reuses the bundle and the INT8 model while what made them is unchanged (--rebuild).",
    )
    p.add_argument(
        "--workdir",
        default="edgert-demo",
        help="where bundles and the report go (default ./edgert-demo)",
    )
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="default: auto")
    p.add_argument(
        "--seconds",
        type=positive_float,
        default=10.0,
        help="how long the camera app runs (default 10)",
    )
    p.add_argument(
        "--calib-size",
        type=positive_int,
        default=DEMO_CALIB_SIZE,
        help=f"INT8 calibration crops (default {DEMO_CALIB_SIZE}; the gate uses "
        f"{HOLDOUT_SIZE} others)",
    )
    p.add_argument(
        "--calib-method",
        default=DEMO_METHOD,
        choices=["auto", "minmax", "entropy", "percentile", "mse"],
        help=f"INT8 calibration method (default {DEMO_METHOD}; auto: each measured, the best "
        "kept, as edgert build does)",
    )
    p.add_argument(
        "--prepare",
        default=DEMO_PREPARE,
        metavar="LIST",
        help=f"INT8 preparations to try (default {DEMO_PREPARE}; auto: the four edgert build "
        "tries, about twice as long)",
    )
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="export and calibrate again even where the inputs are unchanged",
    )
    p.add_argument(
        "--faces", action="store_true", help="MTCNN face detection instead of classification"
    )
    p.add_argument("--top-k", type=positive_int, default=3, help="labels per photo (default 3)")
    p.set_defaults(func=run)


def run(args) -> int:
    import time

    from edgert.apps.camera import CameraConfig, ModelOptions, RunOptions, SinkOptions, run_camera
    from edgert.apps.camera.summary import print_summary

    workdir = Path(args.workdir)
    if args.faces:
        return _faces(args, workdir)
    print(
        "edgert demo: export, INT8 calibration and its gate, classification, the camera app; "
        f"about 2 minutes on 2 CPU cores the first time (the INT8 step is most of it), "
        f"{args.seconds:g} s of camera and a few seconds more when run again with nothing changed"
    )
    took: dict = {}
    t0 = time.perf_counter()
    bundle = _export(workdir, args.rebuild)
    took["export"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    _int8(bundle, workdir, args)
    took["INT8"] = time.perf_counter() - t0

    print("\n== 3. classify the sample photos with the bundle's recorded preprocessing")
    t0 = time.perf_counter()
    precision = _classify(bundle, args)
    took["classify"] = time.perf_counter() - t0

    print(f"\n== 4. the camera app on synthetic:// for {args.seconds:g} s (headless)")
    t0 = time.perf_counter()
    cfg = CameraConfig(
        model=ModelOptions(str(bundle), backend=args.backend, precision=precision),
        sources=["synthetic://"],
        sinks=[f"jsonl://{workdir / 'camera.jsonl'}"],
        sink_options=SinkOptions(headless=True),
        run=RunOptions(duration=args.seconds),
    )
    summary = run_camera(cfg, say=lambda s: print(f"  {s}"))
    print_summary(summary)
    _report(workdir, summary)
    took["camera"] = time.perf_counter() - t0
    print(
        "time: "
        + ", ".join(f"{k} {_seconds(v)}" for k, v in took.items())
        + f"; {_seconds(sum(took.values()))} in all"
    )
    return 0


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _export(workdir: Path, rebuild: bool) -> Path:
    """The demo's bundle: exported now, or the one an earlier demo exported from the same inputs."""
    from . import demo_cache

    bundle = workdir / "mobilenet_v2.edgert"
    key = demo_cache.key("export", EXPORT)
    if not rebuild and demo_cache.bundle_reusable(workdir, bundle, key):
        print(f"== 1. export {EXPORT['model']}: reusing {bundle}")
        print(
            "  made by an earlier edgert demo from the same model, packages and edgert code "
            "(its parity vs PyTorch is in its manifest); --rebuild exports it again"
        )
        return bundle
    print(f"== 1. export {EXPORT['model']} (PyTorch -> ONNX, checked against PyTorch; ~10 s)")
    from edgert.export import export_model

    result = export_model(
        EXPORT["model"],
        bundle,
        dynamic_batch=EXPORT["dynamic_batch"],
        max_batch=EXPORT["max_batch"],
    )
    print(f"bundle: {result.bundle} ({result.seconds:.1f} s)")
    for line in result.parity.lines():
        print(line)
    demo_cache.remember(workdir, "export", key, result.bundle, "model.onnx")
    return result.bundle


def _int8(bundle: Path, workdir: Path, args) -> None:
    """INT8 calibrated on the bundled photos and gated against FP32, or the model an earlier demo
    calibrated and gated from the same inputs."""
    import sys

    from . import demo_cache

    method = None if args.calib_method == "auto" else args.calib_method
    settings = {
        "calib_size": args.calib_size,
        "holdout_size": HOLDOUT_SIZE,
        "calib_method": method,
        "prepare": args.prepare,
    }
    key = demo_cache.key("int8", settings)
    section = None if args.rebuild else demo_cache.int8_reusable(workdir, bundle, key)
    if section is not None:
        cal = section.get("calibration", {})
        print("\n== 2. INT8: reusing model.int8.onnx")
        print(
            f"  calibrated on {cal.get('samples')} crops (+{cal.get('validation_samples')} to "
            f"validate; preparation {section.get('preparation', {}).get('kept')}, method "
            f"{cal.get('method')}) and gated by an earlier edgert demo from the same bundle, "
            "settings, packages and edgert code; --rebuild calibrates it again"
        )
    else:
        print(
            f"\n== 2. INT8: calibrate on {args.calib_size} crops of the bundled photos "
            f"(preparation {args.prepare}, method {args.calib_method}), gate against FP32 on "
            f"{HOLDOUT_SIZE} others (about a minute on 2 cores with the defaults)"
        )
        from edgert.quantize import build

        quiet = getattr(args, "quiet", False)
        report = build(
            bundle,
            "int8",
            calib_size=args.calib_size,
            holdout_size=HOLDOUT_SIZE,
            calib_method=method,
            prepare=args.prepare,
            say=lambda s: print(f"  {s}"),
            progress_to=None if quiet else lambda s: print(f"  {s}", file=sys.stderr, flush=True),
        )
        section = report.quantization
        demo_cache.remember(workdir, "int8", key, bundle, "model.int8.onnx")
    q = section["holdout"]
    print(
        f"INT8 gate passed: cosine {q['cosine']:.4f}, top-1 agreement {q['agreement']:.3f} "
        f"({q['agreement_confident']:.3f} where FP32 is confident) on {HOLDOUT_SIZE} hold-out crops"
    )


def _classify(bundle: Path, args) -> str:
    from edgert.apps import processes
    from edgert.runtime.engine import Engine
    from edgert.runtime.sample_data import PHOTOS, load_photo
    from edgert.runtime.tasks.postprocess import classify

    # "auto": TensorRT runs the best plan the bundle has; ONNX Runtime on a CPU runs whichever gated model was
    # fastest when built (TensorRT's Q/DQ form can be slower than FP32 there), and says so
    engine = processes.uninterrupted(Engine.load, bundle, backend=args.backend, precision="auto")
    precision = "auto"
    with engine:
        print(f"backend: {engine.backend_reason}")
        for name in PHOTOS:
            tensor, _ = engine.preprocessing.apply(load_photo(name))
            logits = engine.infer(tensor[None])["logits"]
            top = classify(logits, engine.labels, args.top_k)[0]
            shown = ", ".join(f"{c.label} {c.score:.3f}" for c in top)
            print(f"  {name + '.jpg':<15} {shown}")
    return precision


def _faces(args, workdir: Path) -> int:
    from edgert.apps.camera import CameraConfig, ModelOptions, RunOptions, SinkOptions, run_camera
    from edgert.apps.camera.summary import print_summary
    from edgert.export import export_model
    from edgert.runtime.sample_data import IMAGES

    print("== 1. export zoo:mtcnn (P-Net, R-Net, O-Net; each checked against PyTorch)")
    result = export_model("zoo:mtcnn", workdir / "mtcnn.edgert")
    print(
        f"bundle: {result.bundle} ({result.seconds:.1f} s); P-Net parity max abs {result.parity.max_abs:.2e}"
    )
    print("\n== 2. faces in the bundled photos (astronaut and camera have one; the others none)")
    cfg = CameraConfig(
        model=ModelOptions(str(result.bundle), backend=args.backend),
        sources=[str(IMAGES / "*.jpg")],
        sinks=[f"jsonl://{workdir / 'faces.jsonl'}"],
        sink_options=SinkOptions(headless=True),
        run=RunOptions(max_frames=20),
    )
    summary = run_camera(cfg, say=lambda s: print(f"  {s}"))
    names = sorted(p.name for p in IMAGES.glob("*.jpg"))
    for line in (workdir / "faces.jsonl").read_text().splitlines()[1:]:  # after the header
        record = json.loads(line)
        name, faces = names[record["frame"]], record["results"]
        boxes = (
            ", ".join(
                f"[{', '.join(f'{v:.0f}' for v in f['box'])}] {f['score']:.2f}" for f in faces
            )
            or "none"
        )
        print(f"  {name:<15} {len(faces)} face(s): {boxes}")
    print_summary(summary)
    _report(workdir, summary, name="faces_report")
    return 0


def _report(workdir: Path, summary: dict, name: str = "report") -> None:
    from edgert.runtime import atomic

    path = workdir / f"{name}.json"
    atomic.write_text(path, json_text.dumps(summary, indent=2, default=str) + "\n")
    try:
        from edgert.apps.plots import camera_plot

        png = camera_plot(summary, workdir / f"{name}.png")
        print(f"report: {path} and {png}")
    except Exception as exc:  # noqa: BLE001 - matplotlib is optional; the JSON is the report
        print(f"report: {path} (no plot: {exc})")
