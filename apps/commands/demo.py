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


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole chain on built-in defaults (e.g. edgert demo, edgert demo --faces)",
        description="Export the built-in MobileNetV2, make a calibrated and gated INT8 model, pick the "
        "best engine, classify the sample photos and run the camera app on a synthetic scene.",
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
        "--calib-size", type=positive_int, default=300, help="INT8 calibration crops (default 300)"
    )
    p.add_argument(
        "--faces", action="store_true", help="MTCNN face detection instead of classification"
    )
    p.add_argument("--top-k", type=positive_int, default=3, help="labels per photo (default 3)")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.apps.camera import CameraConfig, ModelOptions, RunOptions, SinkOptions, run_camera
    from edgert.apps.camera.summary import print_summary
    from edgert.export import export_model

    workdir = Path(args.workdir)
    if args.faces:
        return _faces(args, workdir)
    print("== 1. export zoo:mobilenet_v2 (PyTorch -> ONNX, checked against PyTorch)")
    result = export_model(
        "zoo:mobilenet_v2", workdir / "mobilenet_v2.edgert", dynamic_batch=True, max_batch=8
    )
    print(f"bundle: {result.bundle} ({result.seconds:.1f} s)")
    for line in result.parity.lines():
        print(line)

    print("\n== 2. INT8: calibrate on the bundled photos, gate against FP32")
    from edgert.quantize import build

    report = build(
        result.bundle,
        "int8",
        calib_size=args.calib_size,
        holdout_size=150,
        say=lambda s: print(f"  {s}"),
    )
    q = report.quantization["holdout"]
    print(
        f"INT8 gate passed: cosine {q['cosine']:.4f}, top-1 agreement {q['agreement']:.3f} ({q['agreement_confident']:.3f} where FP32 is confident)"
    )

    print("\n== 3. classify the sample photos with the bundle's recorded preprocessing")
    precision = _classify(result.bundle, args)

    print(f"\n== 4. the camera app on synthetic:// for {args.seconds:g} s (headless)")
    cfg = CameraConfig(
        model=ModelOptions(str(result.bundle), backend=args.backend, precision=precision),
        sources=["synthetic://"],
        sinks=[f"jsonl://{workdir / 'camera.jsonl'}"],
        sink_options=SinkOptions(headless=True),
        run=RunOptions(duration=args.seconds),
    )
    summary = run_camera(cfg, say=lambda s: print(f"  {s}"))
    print_summary(summary)
    _report(workdir, summary)
    return 0


def _classify(bundle: Path, args) -> str:
    from edgert.apps import processes
    from edgert.runtime.engine import Engine
    from edgert.runtime.postprocess import classify
    from edgert.runtime.sample_data import PHOTOS, load_photo

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
