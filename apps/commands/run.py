"""edgert run: images through a model with its recorded preprocessing; results and timing."""

from __future__ import annotations

import json
import time


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run images through a model (e.g. edgert run mobilenet_v2.edgert cat.jpg --top-k 3)",
        description="Run images through a bundle, .onnx or .engine using the preprocessing recorded "
        "in the bundle, and print results and timing.",
    )
    p.add_argument("model", metavar="MODEL", help="bundle folder, .onnx or .engine")
    p.add_argument("images", metavar="IMAGE", nargs="+")
    p.add_argument("--backend", default="auto", help="auto, tensorrt or onnxruntime (default auto)")
    p.add_argument("--precision", default="auto", help="auto, fp32, fp16 or int8 (default auto)")
    p.add_argument(
        "--top-k", type=int, default=5, help="classification labels per image (default 5)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per image")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.runtime.engine import Engine
    from edgert.runtime.errors import ModelError
    from edgert.runtime.images import read_image
    from edgert.runtime.postprocess import classify

    with Engine.load(args.model, backend=args.backend, precision=args.precision) as engine:
        pre = engine.preprocessing
        if pre is None:
            raise ModelError(
                f"{args.model} records no preprocessing; export it with 'edgert export' first"
            )
        if not args.json:
            print(f"backend: {engine.backend_reason}")
        for path in args.images:
            image = read_image(path)
            t0 = time.perf_counter()
            tensor, _ = pre.apply(image)
            t1 = time.perf_counter()
            outputs = engine.infer(tensor[None])
            t2 = time.perf_counter()
            timing = {"preprocess_ms": (t1 - t0) * 1e3, "infer_ms": (t2 - t1) * 1e3}
            first = next(iter(outputs.values()))
            task = engine.manifest.task if engine.manifest else "generic"
            if task == "classify":
                top = classify(first, engine.labels, args.top_k)[0]
                result = [
                    {"label": c.label, "index": c.index, "score": round(c.score, 6)} for c in top
                ]
            else:
                result = {
                    n: {"shape": list(v.shape), "dtype": v.dtype.name} for n, v in outputs.items()
                }
            if args.json:
                print(
                    json.dumps(
                        {
                            "image": str(path),
                            "results": result,
                            **{k: round(v, 3) for k, v in timing.items()},
                        }
                    )
                )
                continue
            print(
                f"{path}  (preprocess {timing['preprocess_ms']:.1f} ms, infer {timing['infer_ms']:.1f} ms)"
            )
            if task == "classify":
                for c in result:
                    print(f"  {c['score']:7.4f}  {c['label']}")
            else:
                for name, info in result.items():
                    print(f"  {name}: {info['dtype']} {info['shape']}")
    return 0
