"""edgert export-triton: a Triton Inference Server model repository entry from a bundle."""

from __future__ import annotations

import json

from edgert.apps.argtypes import nonneg_int, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export-triton",
        help="Triton model repository from a bundle (e.g. edgert export-triton m.edgert --repo models/)",
        description="Write DIR/<name>/config.pbtxt and DIR/<name>/1/model.plan (or model.onnx) for NVIDIA "
        "Triton Inference Server, with the bundle's I/O, batching and preprocessing.",
    )
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--repo", required=True, metavar="DIR", help="the model repository folder")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--engine", metavar="KEY", help="serve this cached TensorRT plan (platform tensorrt_plan)"
    )
    which.add_argument(
        "--onnx",
        action="store_true",
        help="serve model.onnx (platform onnxruntime_onnx; the default)",
    )
    p.add_argument(
        "--max-batch",
        type=nonneg_int,
        metavar="N",
        help="max_batch_size (default: the bundle's maximum; 0 for fixed-batch models)",
    )
    p.add_argument(
        "--instances", type=positive_int, default=1, metavar="N", help="model instances (default 1)"
    )
    p.add_argument(
        "--version",
        type=positive_int,
        default=1,
        metavar="N",
        help="the model version folder to write (default 1); other versions are left alone",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace config.pbtxt, labels.txt or VERSION/model.* even when edgert did not write them",
    )
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.export.triton import RECORD, export_triton, other_versions

    target = export_triton(
        args.bundle,
        args.repo,
        args.engine,
        args.onnx,
        args.max_batch,
        args.instances,
        args.version,
        args.force,
    )
    others = other_versions(target, args.version)
    if args.json:
        files = sorted(
            str(p.relative_to(target))
            for p in target.rglob("*")
            if p.is_file() and p.name != RECORD
        )
        print(
            json.dumps(
                {
                    "model": target.name,
                    "folder": str(target),
                    "version": args.version,
                    "other_versions": others,
                    "files": files,
                },
                indent=2,
            )
        )
    else:
        print(f"wrote {target}/config.pbtxt and {target}/{args.version}/")
        if others:
            print(
                f"note: {target} also holds version(s) {', '.join(map(str, others))}, left as they "
                "were; Triton serves the latest version unless config.pbtxt's version_policy says otherwise"
            )
    return 0
