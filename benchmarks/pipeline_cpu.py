"""The CPU around inference (issue 47): preprocessing per mode against plain OpenCV, and the camera
run's CPU per frame against the decoder's floor.

1. ``preprocess``: one 1080p BGR frame through each mode of ``Preprocessing.apply`` (now), the
   implementation before issue 47 (``tests/runtime/images/preprocess_reference.py``) and the plain
   OpenCV equivalent (uint8 ``cv2.resize`` with the same kernel, crop or ``copyMakeBorder``, then
   the faster of ``cv2.dnn.blobFromImage`` and one numpy pass per normalisation step, ending in
   the contiguous tensor a model takes). Goal: now within 1.2x of the floor for every mode.
2. ``camera``: ``edgert camera --headless`` on rendered H.264 files (1080p, 720p) with a trivial
   model (``zoo:digits_cnn``) and a 640x640 letterbox detector whose graph is tiny (the I/O of a
   YOLO head, ~1 ms on ONNX Runtime), against the floor: ``cv2.VideoCapture`` (FFmpeg) read +
   ``cv2.resize`` to the model's input, one thread. Each command runs twice (N and N/6 frames) and
   the difference is reported, so start-up (imports, model load) is not counted. CPU seconds are
   the child's user + system time. Decoders: FFmpeg; GStreamer with full frames
   (``--decoder-scale off``); GStreamer scaling to the model's input (the default when no sink
   needs full frames). A second floor adds the model as a plain script runs it (letterbox with
   ``copyMakeBorder``, ``cv2.dnn.blobFromImage``, ONNX Runtime's ``session.run`` without spinning,
   as the camera, and for the detector the scores thresholded and ``cv2.dnn.NMSBoxes``): the
   detector's rows are judged against it; the web viewer on, nobody watching (scaled, no JPEG) and watched by a
   client in this process (full frames, the overlay drawn and JPEG-encoded for it). Goals: within
   1.15x of the floor's CPU per frame with no full-frame sink (1 and 4 streams); watched, 1.5x.

    python benchmarks/pipeline_cpu.py [--json reports/pipeline_cpu.json] [--frames 600]
        [--only preprocess|camera] [--repeat 30] [--streams 1,4] [--videos 1080p,720p]
        [--models digits,det640] [--decoders "gst scaled,ffmpeg"] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from json_report import write_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the reference implementation lives with the tests

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
MODES = {  # name: Preprocessing fields
    "letterbox 640 bilinear (YOLO)": {
        "size": (640, 640),
        "resize": "letterbox",
        "interpolation": "bilinear",
    },
    "letterbox 640 nearest": {
        "size": (640, 640),
        "resize": "letterbox",
        "interpolation": "nearest",
    },
    "letterbox 640 linear (area), NHWC fp16": {
        "size": (640, 640),
        "resize": "letterbox",
        "layout": "NHWC",
        "dtype": "float16",
    },
    "stretch 224 linear (area), ImageNet": {"size": (224, 224), "resize": "stretch", **IMAGENET},
    "resize_crop 224/256 cubic, ImageNet": {
        "size": (224, 224),
        "resize": "resize_crop",
        "resize_short": 256,
        "interpolation": "cubic",
        **IMAGENET,
    },
    "resize_crop 224/256 bilinear, BGR": {
        "size": (224, 224),
        "resize": "resize_crop",
        "resize_short": 256,
        "interpolation": "bilinear",
        "channel_order": "BGR",
    },
    "stretch 8x8 area, grey (digits)": {
        "size": (8, 8),
        "resize": "stretch",
        "interpolation": "area",
        "channel_order": "GRAY",
        "scale": 1 / 16,
        "mean": (0.0,),
        "std": (1.0,),
    },
    "stretch 96x128 bilinear, grey": {
        "size": (96, 128),
        "resize": "stretch",
        "interpolation": "bilinear",
        "channel_order": "GRAY",
        "mean": (0.5,),
        "std": (0.25,),
    },
    "none 1080x1920, NHWC": {"size": (1080, 1920), "resize": "none", "layout": "NHWC"},
}


def median_ms(fn, repeat: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples)) * 1e3


def opencv_floor(pre, frame: np.ndarray):
    """The plain OpenCV equivalent of ``pre`` on a uint8 BGR frame (its fastest form)."""
    import cv2

    from edgert.runtime.images.resize import INTERPOLATIONS as _INTERPOLATIONS

    interp = {"nearest": cv2.INTER_NEAREST_EXACT}.get(
        pre.interpolation, _INTERPOLATIONS[pre.interpolation]
    )
    t = pre.geometry(frame.shape[:2])
    nw, nh = t.resized_wh
    grey = pre.channel_order == "GRAY"
    if pre.interpolation == "linear" and (nw < frame.shape[1] or nh < frame.shape[0]):
        interp = cv2.INTER_AREA
    mean, std = np.asarray(pre.mean, np.float32), np.asarray(pre.std, np.float32)

    def geometry():
        img = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY) if grey else frame
        if pre.resize != "none":
            img = cv2.resize(img, (nw, nh), interpolation=interp)
        if pre.resize == "letterbox":
            th, tw = pre.size
            top, left = int(t.oy), int(t.ox)
            img = cv2.copyMakeBorder(
                img,
                top,
                th - nh - top,
                left,
                tw - nw - left,
                cv2.BORDER_CONSTANT,
                value=(pre.pad_value,) * 3,
            )
        elif pre.resize == "resize_crop":
            top, left = int(-t.oy), int(-t.ox)
            img = img[top : top + pre.size[0], left : left + pre.size[1]]
        return img if img.ndim == 3 else img[:, :, None]

    swap = pre.channel_order == "RGB"

    def with_blob():
        img = geometry()
        if pre.layout == "NHWC":
            return None
        blob = cv2.dnn.blobFromImage(
            img,
            pre.scale,
            mean=tuple(float(m) / pre.scale for m in mean) * (3 // len(mean)),
            swapRB=swap,
        )[0]
        if (std != 1).any():
            blob /= std.reshape(-1, 1, 1)
        return blob.astype(pre.dtype, copy=False)

    def with_numpy():
        img = geometry()
        if swap:
            img = img[:, :, ::-1]
        if pre.layout == "NCHW":
            img = img.transpose(2, 0, 1)
        shape = (-1, 1, 1) if pre.layout == "NCHW" else (-1,)
        out = np.multiply(img, np.float32(pre.scale), dtype=np.float32)
        if mean.any():
            out -= mean.reshape(shape)
        if (std != 1).any():
            out /= std.reshape(shape)
        # numpy keeps the transposed input's memory order (a strided view of HWC): the model
        # takes a contiguous tensor, which blobFromImage and Preprocessing.apply write directly
        return np.ascontiguousarray(out.astype(pre.dtype, copy=False))

    return with_blob, with_numpy


def bench_preprocess(repeat: int) -> list[dict]:
    import cv2

    from edgert.runtime import Preprocessing
    from edgert.runtime.sample_data import load_photo
    from tests.runtime.images.preprocess_reference import reference_apply

    frame = cv2.resize(load_photo("coffee"), (1920, 1080), interpolation=cv2.INTER_CUBIC)
    rows = []
    for name, fields in MODES.items():
        pre = Preprocessing(**fields)
        blob, plain = opencv_floor(pre, frame)
        now = median_ms(lambda pre=pre: pre.apply(frame), repeat)
        before = median_ms(lambda pre=pre: reference_apply(pre, frame), max(5, repeat // 3))
        floors = [median_ms(plain, repeat)]
        if blob() is not None:
            floors.append(median_ms(blob, repeat))
        floor = min(floors)
        rows.append(
            {
                "mode": name,
                "now_ms": now,
                "before_ms": before,
                "opencv_floor_ms": floor,
                "now_vs_floor": now / floor,
                "before_vs_floor": before / floor,
                "within_1_2x": now / floor <= 1.2,
            }
        )
    return rows


# -- the camera run ------------------------------------------------------------------------------
def render(path: Path, width: int, height: int, frames: int) -> Path:
    subprocess.run(
        [
            "ffmpeg",
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            f"testsrc2=size={width}x{height}:rate=30",
            "-frames:v",
            str(frames),
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-pix_fmt",
            "yuv420p",
            "-g",
            "30",
            str(path),
        ],
        check=True,
    )
    return path


def detector_bundle(folder: Path) -> Path:
    from edgert.export import export_model
    from tests.tiny import blob_detector

    onnx_path = blob_detector(folder / "det640.onnx", 640, 640, cell=16, window=4)
    labels = folder / "labels.txt"
    labels.write_text("blob\n")
    pre = {"resize": "letterbox", "size": "640x640", "scale": 1 / 255, "interpolation": "bilinear"}
    return export_model(
        str(onnx_path), folder / "det640.edgert", task="detect", labels=labels, preprocess=pre
    ).bundle


WEB = "http://127.0.0.1:{port}"  # the web viewer on a free port; "watched": a client reads it
# the floor: decode + resize to the model's input, one thread; given a model (argv[5]), the
# floor with the model as a plain script runs it
FLOOR = """
import sys, cv2, numpy as np
cv2.setNumThreads(1)
path, n, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model = sys.argv[5] if len(sys.argv) > 5 else None
if model is not None:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    grey = inp.shape[1] == 1
cap = cv2.VideoCapture(path)
done = 0
while done < n:
    ok, frame = cap.read()
    if not ok:
        cap.release(); cap = cv2.VideoCapture(path); continue
    if model is None:
        cv2.resize(frame, (w, h), interpolation=cv2.INTER_LINEAR)
        done += 1
        continue
    if grey:  # digits: grey first, stretched with area averaging
        img = cv2.resize(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY), (w, h),
                         interpolation=cv2.INTER_AREA)
    else:  # the detector: a letterbox
        s = min(w / frame.shape[1], h / frame.shape[0])
        nw, nh = round(frame.shape[1] * s), round(frame.shape[0] * s)
        img = cv2.resize(frame, (nw, nh), interpolation=cv2.INTER_LINEAR)
        top, left = (h - nh) // 2, (w - nw) // 2
        img = cv2.copyMakeBorder(img, top, h - nh - top, left, w - nw - left,
                                 cv2.BORDER_CONSTANT, value=114)
    blob = cv2.dnn.blobFromImage(img, 1 / 255.0, swapRB=not grey)
    out = sess.run(None, {inp.name: blob})[0]
    if not grey:  # a YOLO head [1, 4 + classes, anchors]: what a plain script does with it
        pred = out[0].T
        scores = pred[:, 4:].max(axis=1)
        keep = scores > 0.25
        xywh = pred[keep, :4]
        boxes = np.column_stack([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, 2:]])
        cv2.dnn.NMSBoxes(boxes.tolist(), scores[keep].tolist(), 0.25, 0.45)
    done += 1
"""

DECODERS = {  # the row's name: (the camera's flags, a web viewer on, a client watching it)
    "ffmpeg": (["--decoder", "ffmpeg"], False, False),
    "gst full": (["--decoder", "gstreamer", "--decoder-scale", "off"], False, False),
    "gst scaled": (["--decoder", "gstreamer"], False, False),  # scaled in GStreamer
    "gst + web, unwatched": (["--decoder", "gstreamer"], True, False),
    "gst + web, watched": (["--decoder", "gstreamer"], True, True),
    "ffmpeg + web, watched": (["--decoder", "ffmpeg"], True, True),
}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def watch(port: int, done) -> None:
    """A web viewer's client: reads the MJPEG stream (connecting as soon as the run listens)
    until the run ends. Runs in this process, so its CPU is not the child's."""
    import urllib.request

    while not done.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/stream.mjpg", timeout=5) as r:
                while r.read1(1 << 16):
                    pass
        except OSError:
            time.sleep(0.02)


def timed(cmd: list[str], env: dict, watch_port: int | None = None) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one command; a client watches the web viewer on
    ``watch_port`` while it runs."""
    import threading

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = threading.Event()
    viewer = None
    if watch_port is not None:
        viewer = threading.Thread(target=watch, args=(watch_port, done), daemon=True)
        viewer.start()
    t0 = time.monotonic()
    try:
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        done.set()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if viewer is not None:
        viewer.join(timeout=10)
    return wall, cpu


def per_frame(make_cmd, frames: int, env: dict, watched: bool = False) -> dict:
    """Per-frame wall and CPU of a command run for ``frames`` and ``frames // 6`` frames
    (``make_cmd(n, port)``; ``watched``: a client reads the web viewer on ``port``)."""
    few = max(1, frames // 6)
    runs = []
    for n in (few, frames):
        port = free_port()
        runs.append(timed(make_cmd(n, port), env, port if watched else None))
    (w1, c1), (w2, c2) = runs
    n = frames - few
    return {"fps": n / max(w2 - w1, 1e-9), "cpu_ms_per_frame": (c2 - c1) / n * 1e3}


def bench_camera(
    frames: int,
    streams_list: list[int],
    work: Path,
    videos: list[str],
    models_wanted: list[str],
    decoders: list[str] | None = None,
    before: str | None = None,
) -> list[dict]:
    """The camera rows; ``decoders``: those of :data:`DECODERS` to run (default all);
    ``before``: a folder holding the code of before as a package ``edgert`` (run first on
    ``PYTHONPATH``), each row also run with it, alternately, for a before/after of one run."""
    edgert = [sys.executable, "-m", "edgert.apps.cli"]
    env = dict(os.environ)
    env_before = dict(env, PYTHONPATH=str(Path(before).resolve())) if before else None
    digits = work / "digits.edgert"
    subprocess.run(
        [*edgert, "export", "zoo:digits_cnn", "-o", str(digits), "-q"], check=True, env=env
    )
    models = {}
    if "digits" in models_wanted:
        models["digits_cnn (8x8 grey)"] = (digits, (8, 8))
    if "det640" in models_wanted:
        models["det640 (letterbox)"] = (detector_bundle(work), (640, 640))
    sizes = {"1080p": (1920, 1080), "720p": (1280, 720)}
    rows = []
    for label, (w, h) in ((v, sizes[v]) for v in videos):
        video = render(work / f"{label}.mp4", w, h, 300)
        for model, (bundle, (mh, mw)) in models.items():
            floor = per_frame(
                lambda n, _port, v=video, w=mw, h=mh: [
                    sys.executable,
                    "-c",
                    FLOOR,
                    str(v),
                    str(n),
                    str(w),
                    str(h),
                ],
                frames,
                env,
            )
            # the floor with the model run as a plain script would: blobFromImage, session.run
            onnx = str(Path(bundle) / "model.onnx")
            with_model = per_frame(
                lambda n, _port, v=video, w=mw, h=mh, m=onnx: [
                    sys.executable,
                    "-c",
                    FLOOR,
                    str(v),
                    str(n),
                    str(w),
                    str(h),
                    m,
                ],
                frames,
                env,
            )
            for streams in streams_list:
                for decoder, (flags, web, watched) in DECODERS.items():
                    if decoders and decoder not in decoders:
                        continue

                    def cmd(
                        n, port, flags=flags, streams=streams, video=video, bundle=bundle, web=web
                    ):
                        sources = []
                        for _ in range(streams):
                            sources += ["--source", str(video)]
                        out = ["--output", WEB.format(port=port)] if web else []
                        return [
                            *edgert,
                            "camera",
                            str(bundle),
                            *sources,
                            "--headless",
                            "--loop",
                            "--max-frames",
                            str(n),
                            *flags,
                            *out,
                            "-q",
                        ]

                    try:
                        was = per_frame(cmd, frames, env_before, watched) if before else None
                        got = per_frame(cmd, frames, env, watched)
                    except subprocess.CalledProcessError as exc:
                        print(f"  {label} {model} {decoder}: {exc.stderr.decode()[-300:]}")
                        continue
                    cpu_frame = got["cpu_ms_per_frame"] / streams
                    if was is not None:
                        rows.append(
                            {
                                "video": label,
                                "model": model,
                                "streams": streams,
                                "decoder": decoder + " (before)",
                                "fps": was["fps"] * streams,
                                "cpu_ms_per_frame": was["cpu_ms_per_frame"] / streams,
                                "floor_fps": floor["fps"],
                                "floor_cpu_ms_per_frame": floor["cpu_ms_per_frame"],
                                "cpu_vs_floor": was["cpu_ms_per_frame"]
                                / streams
                                / floor["cpu_ms_per_frame"],
                                "floor_model_cpu_ms_per_frame": with_model["cpu_ms_per_frame"],
                                "cpu_vs_floor_model": was["cpu_ms_per_frame"]
                                / streams
                                / with_model["cpu_ms_per_frame"],
                            }
                        )
                    rows.append(
                        {
                            "video": label,
                            "model": model,
                            "streams": streams,
                            "decoder": decoder,
                            "fps": got["fps"] * streams,
                            "cpu_ms_per_frame": cpu_frame,
                            "floor_fps": floor["fps"],
                            "floor_cpu_ms_per_frame": floor["cpu_ms_per_frame"],
                            "cpu_vs_floor": cpu_frame / floor["cpu_ms_per_frame"],
                            "floor_model_cpu_ms_per_frame": with_model["cpu_ms_per_frame"],
                            "cpu_vs_floor_model": cpu_frame / with_model["cpu_ms_per_frame"],
                        }
                    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/pipeline_cpu.json")
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--only", choices=["preprocess", "camera"])
    ap.add_argument("--videos", default="1080p,720p", help="of 1080p, 720p")
    ap.add_argument("--models", default="digits,det640", help="of digits, det640")
    ap.add_argument("--decoders", help="the camera rows to run, comma-separated (default all)")
    ap.add_argument(
        "--before",
        metavar="DIR",
        help="also run each camera row with the code in DIR/edgert (e.g. mkdir -p DIR/edgert "
        "&& git archive REV | tar -x -C DIR/edgert), alternately: before/after in one run",
    )
    args = ap.parse_args()
    started = time.monotonic()
    results: dict = {"cpu_count": os.cpu_count()}
    if args.only in (None, "preprocess"):
        rows = results["preprocess"] = bench_preprocess(args.repeat)
        print(
            f"{'mode (1080p BGR frame)':42s} {'now':>8s} {'before':>8s} {'floor':>8s} "
            f"{'now/fl':>7s} {'bef/fl':>7s}"
        )
        for r in rows:
            print(
                f"{r['mode']:42s} {r['now_ms']:7.2f}m {r['before_ms']:7.2f}m "
                f"{r['opencv_floor_ms']:7.2f}m {r['now_vs_floor']:6.2f}x {r['before_vs_floor']:6.2f}x"
            )
    if args.only in (None, "camera"):
        with tempfile.TemporaryDirectory() as tmp:
            streams = [int(s) for s in args.streams.split(",")]
            rows = results["camera"] = bench_camera(
                args.frames,
                streams,
                Path(tmp),
                args.videos.split(","),
                args.models.split(","),
                args.decoders.split(",") if args.decoders else None,
                args.before,
            )
        print(
            f"\n{'video':6s} {'model':22s} {'str':>3s} {'decoder':22s} "
            f"{'fps':>7s} {'CPU ms/f':>9s} {'floor fps':>9s} {'floor ms':>8s} {'ratio':>6s} "
            f"{'+model ms':>9s} {'ratio':>6s}"
        )
        for r in rows:
            print(
                f"{r['video']:6s} {r['model']:22s} {r['streams']:3d} {r['decoder']:22s} "
                f"{r['fps']:7.1f} "
                f"{r['cpu_ms_per_frame']:9.2f} {r['floor_fps']:9.1f} "
                f"{r['floor_cpu_ms_per_frame']:8.2f} {r['cpu_vs_floor']:5.2f}x "
                f"{r['floor_model_cpu_ms_per_frame']:9.2f} {r['cpu_vs_floor_model']:5.2f}x"
            )
    results["took_s"] = round(time.monotonic() - started, 1)
    print(f"took {results['took_s']:.0f} s")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
