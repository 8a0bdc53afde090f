"""edgert build: FP16 / INT8 (calibrated, gated) models and the TensorRT plan for this device."""

from __future__ import annotations

import argparse
import sys

from edgert.apps.argtypes import nonneg_int, positive_float, positive_int
from edgert.runtime import json_text
from edgert.runtime.precision import PRECISIONS, QDQ, model_file

EPILOG = """The INT8 model is explicit quantization (Q/DQ ONNX, symmetric INT8, per-channel weights),
so it runs in ONNX Runtime anywhere and TensorRT 8.5 to 11 builds it. Without TensorRT (CI, a
laptop) everything but the plan is written and checked; the plan is built on the device.

gate rules (defaults): cosine>=0.99, agreement_confident>=0.97, top5_contains_fp32>=0.97,
accuracy_drop<=0.01 (with labels), box_f1>=0.9 (detectors); --gate off disables the gate.

An INT8 build calibrates several preparations with several methods and gates the result: minutes
on a laptop (MobileNetV2, 500 samples: about 6 minutes on 2 cores). After 10 s without output
(EDGERT_PROGRESS_SECONDS) it says on standard error which step runs, n of N and the time left;
-q/--quiet leaves those lines out. --calib-size and --prepare none make it faster.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "build",
        help="FP16/INT8 + TensorRT plan (e.g. edgert build mobilenet_v2.edgert --precision int8)",
        description="Make FP16 or calibrated, accuracy-gated INT8 models for a bundle and build its TensorRT plan.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model", metavar="MODEL", help="bundle folder, or an .onnx (wrapped into a bundle)"
    )
    p.add_argument(
        "--precision",
        choices=list(PRECISIONS),
        default="fp16",
        help="fp8: E4M3 Q/DQ for GPUs of compute capability 8.9+ (Ada, Hopper, Jetson Thor)",
    )
    p.add_argument(
        "--calib",
        metavar="SOURCE",
        help="folder of images, video, .npz, or 'zoo' (default for zoo models)",
    )
    p.add_argument(
        "--calib-size",
        type=positive_int,
        default=500,
        metavar="N",
        help="calibration samples (default 500, or all if fewer)",
    )
    p.add_argument(
        "--holdout-size",
        type=positive_int,
        default=200,
        metavar="N",
        help="hold-out samples for the gate (default 200)",
    )
    _search_arguments(p)
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def _search_arguments(p) -> None:
    """INT8's search and gate, and the TensorRT plan's options."""
    p.add_argument(
        "--calib-labels",
        metavar="PATH",
        help="boxes labelled on the --calib folder's images, for a detector: a COCO .json, or a "
        "folder of YOLO .txt files named as the images (the --calib folder when they sit beside "
        "them); the gate also gives FP32's and the quantized model's mAP against them",
    )
    p.add_argument(
        "--calib-method",
        choices=["minmax", "entropy", "percentile", "mse"],
        help="default: chosen by measurement",
    )
    p.add_argument(
        "--prepare",
        default="auto",
        metavar="LIST",
        help="INT8 preparations to try, the best kept: auto (the first four), or from none, "
        "equalize, bias, equalize+bias, adaround, equalize+adaround, equalize+bias+adaround, "
        "shift+bias, equalize+shift+bias (comma-separated); equalize: "
        "activation equalisation into depthwise convolutions; bias: bias correction of weight "
        "rounding; adaround: adaptive rounding of weights, layer by layer (minutes); shift: "
        "inputs after ReLU moved to the middle of their range, so symmetric INT8 uses all its "
        "levels (adds a Sub / Add per shifted layer)",
    )
    p.add_argument("--gate", metavar="RULES", help="e.g. 'cosine>=0.995,agreement>=0.9', or 'off'")
    p.add_argument(
        "--dla",
        type=nonneg_int,
        metavar="N",
        help="build for DLA core N (FP16/INT8, static shapes, GPU fallback)",
    )
    p.add_argument(
        "--workspace", type=positive_float, metavar="GIB", help="TensorRT workspace limit in GiB"
    )
    p.add_argument(
        "--opt-level", type=int, metavar="0-5", help="TensorRT builder optimisation level"
    )
    p.add_argument(
        "--shapes",
        metavar="MIN:OPT:MAX",
        help="profile, e.g. 1x3x224x224:4x3x224x224:8x3x224x224 (name=... for several inputs)",
    )
    p.add_argument(
        "--no-engine", action="store_true", help="make and gate the models, skip the TensorRT plan"
    )


def parse_shapes(text: str | None) -> dict:
    from edgert.runtime.errors import ModelError

    if not text:
        return {}
    out = {}
    for part in text.split(","):
        name, _, spec = part.rpartition("=")
        dims = spec.split(":")
        if len(dims) != 3:
            raise ModelError(f"--shapes {part!r} is not min:opt:max")
        try:
            out[name or ""] = tuple(tuple(int(d) for d in s.lower().split("x")) for s in dims)
        except ValueError:
            raise ModelError(f"--shapes {part!r} has a dimension that is not a number") from None
    return out


def _device_build(args) -> int:
    """Python < 3.10 (JetPack 5): only the TensorRT plan, from a bundle made on the host, with
    the options ``edgert build`` takes on the host (``--dla``, ``--shapes``, ``--workspace``,
    ``--opt-level``). Calibration and Q/DQ (edgert.quantize) need the host's Python 3.10+."""
    from pathlib import Path

    from edgert.runtime import Bundle
    from edgert.runtime.backends import tensorrt_compat as compat
    from edgert.runtime.backends.plan_check import build_checked_plan
    from edgert.runtime.backends.tensorrt import TensorRTBackend
    from edgert.runtime.backends.tensorrt_logger import import_tensorrt
    from edgert.runtime.backends.tensorrt_plan import BuildOptions
    from edgert.runtime.errors import BackendUnavailable, MissingDependency

    here = ".".join(map(str, sys.version_info[:3]))
    host = (
        f"making {args.precision.upper()} models needs Python 3.10 or newer (this is {here}): "
        f"run edgert build on the host, copy the bundle here, then run: edgert build BUNDLE "
        f"--precision {args.precision} to build its TensorRT plan"
    )
    bundle = Bundle(args.model) if Path(args.model).is_dir() else None
    qdq = args.precision in QDQ and args.dla is None  # made on the host whatever the TensorRT
    if (
        bundle is None
        or args.calib
        or args.calib_labels
        or (qdq and model_file(args.precision) not in bundle.manifest.hashes)
    ):
        raise MissingDependency(host)
    why_not = TensorRTBackend.availability()
    if why_not:
        raise BackendUnavailable(f"no TensorRT plan can be built here: {why_not}")
    inputs = bundle.manifest.inputs
    options = BuildOptions.from_request(
        args.precision,
        args.workspace,
        args.opt_level,
        parse_shapes(args.shapes),
        args.dla,
        inputs[0].name if inputs else None,
    )
    # the model this TensorRT builds the plan from (8.5 and 10 make FP16 from model.onnx)
    version = compat.parse_version(import_tensorrt().__version__)
    hashes = bundle.manifest.hashes
    if (
        compat.plan_source_model(version, args.precision, args.dla is not None, hashes)
        not in hashes
    ):
        raise MissingDependency(host)
    plan, built, check = build_checked_plan(
        bundle.path, args.precision, options=options, check_cached=True
    )
    said = check.summary if check else "no stored samples to verify against"
    print(f"{'built' if built else 'cached'}: {plan} ({said})")
    return 0


def run(args) -> int:
    if sys.version_info < (3, 10):
        return _device_build(args)
    from edgert.quantize import build

    shapes = parse_shapes(args.shapes)  # an unnamed profile: the bundle's first input

    def say(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    def progress(line: str) -> None:  # standard error: --json's standard output stays JSON
        print(line, file=sys.stderr, flush=True)

    report = build(
        args.model,
        args.precision,
        calib=args.calib,
        calib_size=args.calib_size,
        holdout_size=args.holdout_size,
        calib_method=args.calib_method,
        calib_labels=args.calib_labels,
        prepare=args.prepare,
        gate_rules=args.gate,
        dla=args.dla,
        workspace_gib=args.workspace,
        opt_level=args.opt_level,
        shapes=shapes,
        no_engine=args.no_engine,
        seed=args.seed,
        say=say,
        progress_to=None if getattr(args, "quiet", False) else progress,
    )
    if args.json:
        print(json_text.dumps(report.to_dict(), indent=2))
    else:
        print(
            f"done in {report.seconds:.1f} s: {', '.join(report.files) or 'no new files'} in {report.bundle}"
        )
    return 0
