"""edgert demo: the built-in end-to-end job on defaults (what `make demo` runs).

Now: export the zoo MobileNetV2 to a bundle, print the parity report, and classify the bundled
photos through the runtime Engine with the bundle's recorded preprocessing.
"""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="built-in demo: zoo MobileNetV2 -> bundle -> classify sample photos (e.g. edgert demo)",
        description="Export the built-in MobileNetV2 to a bundle, print its parity report and "
        "classify the bundled sample photos.",
    )
    p.add_argument(
        "--workdir", default="edgert-demo", help="where the bundle goes (default ./edgert-demo)"
    )
    p.add_argument("--backend", default="auto", help="auto, tensorrt or onnxruntime (default auto)")
    p.add_argument("--top-k", type=int, default=3, help="labels per photo (default 3)")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.export import export_model
    from edgert.export.zoo.photos import PHOTOS, load_photo
    from edgert.runtime.engine import Engine
    from edgert.runtime.postprocess import classify

    workdir = Path(args.workdir)
    print("== 1. export zoo:mobilenet_v2 (PyTorch -> ONNX, checked against PyTorch)")
    result = export_model(
        "zoo:mobilenet_v2", workdir / "mobilenet_v2.edgert", dynamic_batch=True, max_batch=8
    )
    print(f"bundle: {result.bundle} ({result.seconds:.1f} s)")
    for line in result.parity.lines():
        print(line)
    print("\n== 2. classify the sample photos with the bundle's recorded preprocessing")
    with Engine.load(result.bundle, backend=args.backend) as engine:
        print(f"backend: {engine.backend_reason}")
        for name in PHOTOS:
            tensor, _ = engine.preprocessing.apply(load_photo(name))
            logits = engine.infer(tensor[None])["logits"]
            top = classify(logits, engine.labels, args.top_k)[0]
            shown = ", ".join(f"{c.label} {c.score:.3f}" for c in top)
            print(f"  {name + '.jpg':<15} {shown}")
    return 0
