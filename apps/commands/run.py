"""edgert run: images through a model with its recorded preprocessing; results and timing."""

from __future__ import annotations

import json
import time

import numpy as np

from edgert.apps.argtypes import fraction, positive_int


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
        "--top-k", type=positive_int, default=5, help="classification labels per image (default 5)"
    )
    p.add_argument(
        "--conf", type=fraction, default=0.25, help="detection confidence threshold (default 0.25)"
    )
    p.add_argument(
        "--iou", type=fraction, default=0.45, help="detection NMS IoU threshold (default 0.45)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per image")
    p.set_defaults(func=run)


def describe(engine, outputs: dict, transform, args) -> object:
    """Results as plain data for the model's task."""
    from edgert.runtime.detection import decode_ssd, decode_yolo
    from edgert.runtime.postprocess import classify, segment

    task = engine.manifest.task if engine.manifest else "generic"
    values = list(outputs.values())
    if task == "classify":
        top = classify(values[0], engine.labels, args.top_k)[0]
        return [{"label": c.label, "index": c.index, "score": round(c.score, 6)} for c in top]
    if task == "detect":
        if len(values) == 2:  # SSD style: boxes + scores
            boxes, scores = sorted(values, key=lambda v: v.shape[-1] != 4)
            size = engine.preprocessing.size if engine.preprocessing else None
            normalised = size if float(boxes.max(initial=0)) <= 1.5 else None
            dets = decode_ssd(
                boxes,
                scores,
                args.conf,
                args.iou,
                input_size=normalised,
                transforms=[transform],
                labels=engine.labels,
            )
        else:
            dets = decode_yolo(
                values[0], args.conf, args.iou, transforms=[transform], labels=engine.labels
            )
        return [d.to_dict() for d in dets[0]]
    if task == "segment":
        mask = segment(values[0])[0]
        classes, counts = np.unique(mask, return_counts=True)
        return {
            "mask_shape": list(mask.shape),
            "classes": {int(c): int(n) for c, n in zip(classes, counts)},
        }
    return {n: {"shape": list(v.shape), "dtype": v.dtype.name} for n, v in outputs.items()}


def run(args) -> int:
    from edgert.runtime.engine import Engine
    from edgert.runtime.errors import ModelError
    from edgert.runtime.images import read_image

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
            tensor, transform = pre.apply(image)
            t1 = time.perf_counter()
            outputs = engine.infer(tensor[None])
            t2 = time.perf_counter()
            result = describe(engine, outputs, transform, args)
            t3 = time.perf_counter()
            timing = {
                "preprocess_ms": (t1 - t0) * 1e3,
                "infer_ms": (t2 - t1) * 1e3,
                "postprocess_ms": (t3 - t2) * 1e3,
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
                f"{path}  (preprocess {timing['preprocess_ms']:.1f} ms, infer {timing['infer_ms']:.1f} ms, "
                f"postprocess {timing['postprocess_ms']:.1f} ms)"
            )
            if isinstance(result, list):
                for r in result:
                    if "box" in r:
                        print(f"  {r['score']:7.4f}  {r['label']:<20} {r['box']}")
                    else:
                        print(f"  {r['score']:7.4f}  {r['label']}")
            else:
                print(f"  {json.dumps(result)}")
    return 0
