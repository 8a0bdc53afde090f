"""edgert run: images through a model with its recorded preprocessing; results and timing."""

from __future__ import annotations

import sys
import time

from edgert.apps.argtypes import BACKENDS, PRECISIONS, fraction, positive_int
from edgert.runtime import json_text
from edgert.runtime.errors import ShapeError, SourceError, escape_controls


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run images through a model (e.g. edgert run mobilenet_v2.edgert cat.jpg --top-k 3)",
        description="Run images through a bundle, .onnx or .engine using the preprocessing recorded "
        "in the bundle, and print results and timing.",
    )
    p.add_argument("model", metavar="MODEL", help="bundle folder, .onnx or .engine")
    p.add_argument("images", metavar="IMAGE", nargs="+", help="image files or folders of images")
    p.add_argument("--backend", default="auto", choices=BACKENDS, help="default: auto")
    p.add_argument("--precision", default="auto", choices=PRECISIONS, help="default: auto")
    p.add_argument(
        "--top-k", type=positive_int, default=5, help="classification labels per image (default 5)"
    )
    p.add_argument(
        "--conf", type=fraction, default=0.25, help="detection confidence threshold (default 0.25)"
    )
    p.add_argument(
        "--iou", type=fraction, default=0.45, help="detection NMS IoU threshold (default 0.45)"
    )
    p.add_argument(
        "--gallery",
        metavar="DIR",
        help="an encoder's (task embed) nearest images in DIR to each image, with their cosine "
        "similarity (--top-k of them)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per image")
    p.set_defaults(func=run)


def _images(paths: list[str]) -> list[str]:
    """The image files named: a folder stands for the images in it (sorted)."""
    from pathlib import Path

    from edgert.runtime.images import IMAGE_SUFFIXES

    files = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(str(f) for f in path.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise SourceError(f"{path} is a folder with no images in it")
            files += found
        else:
            files.append(p)
    return files


def run(args) -> int:
    """Every image in turn; one that cannot be read or preprocessed is reported (named) and the
    rest go on; the exit code is 1 when any failed."""
    from edgert.apps import processes
    from edgert.runtime.images import read_image
    from edgert.runtime.tasks import load_task_model

    images = _images(args.images)
    model = processes.uninterrupted(  # a Ctrl-C in onnx's first import would abort
        load_task_model,
        args.model,
        None,
        args.backend,
        args.precision,
        args.top_k,
        args.conf,
        args.iou,
    )
    failed: list[str] = []
    with model:
        gallery = _gallery(model, args.gallery)
        if not args.json:
            print(f"backend: {model.backend_reason}")
        for path in images:
            try:
                image = read_image(path)
                t0 = time.perf_counter()
                tensor, transform = model.preprocess(image)
            except (SourceError, ShapeError) as exc:
                if len(images) == 1:
                    raise  # the only image: its sentence is the error
                failed.append(path)
                if args.json:
                    print(json_text.dumps({"image": str(path), "error": str(exc)}))
                else:
                    print(escape_controls(f"{path}  skipped: {exc}"))
                continue
            t1 = time.perf_counter()
            outputs = model.infer(model.collate([tensor]))
            t2 = time.perf_counter()
            result = model.postprocess(outputs, [transform])[0]
            t3 = time.perf_counter()
            timing = {
                "preprocess_ms": (t1 - t0) * 1e3,
                "infer_ms": (t2 - t1) * 1e3,
                "postprocess_ms": (t3 - t2) * 1e3,
            }
            _print(args, path, result, timing, gallery)
    if failed:
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        print(
            escape_controls(
                f"edgert run: error: {len(failed)} of {len(images)} images failed: "
                f"{', '.join(failed[:3])}{more}"
            ),
            file=sys.stderr,
        )
        return 1
    return 0


def _gallery(model, folder: str | None):
    """The encoded ``--gallery`` folder, or None without one."""
    if folder is None:
        return None
    from pathlib import Path

    from .gallery import Gallery

    if not Path(folder).is_dir():
        raise SourceError(f"--gallery {folder} is not a folder of images")
    return Gallery.of(model, folder, _images([folder]))


def _print(args, path: str, result, timing: dict, gallery=None) -> None:
    from edgert.runtime.tasks import task_spec

    found = gallery.nearest(result, args.top_k) if gallery is not None else None
    if args.json:
        print(
            json_text.dumps(
                {
                    "image": str(path),
                    "results": result.to_records(),
                    **({"neighbours": found} if found is not None else {}),
                    **{k: round(v, 3) for k, v in timing.items()},
                }
            )
        )
        return
    print(
        f"{escape_controls(str(path))}  (preprocess {timing['preprocess_ms']:.1f} ms, "
        f"infer {timing['infer_ms']:.1f} ms, "
        f"postprocess {timing['postprocess_ms']:.1f} ms)"
    )
    for line in task_spec(result.task).lines(result):
        print(line)
    for line in gallery.lines(found) if gallery is not None else []:
        print(line)
