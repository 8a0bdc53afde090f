"""What ``benchmarks/streams.py`` serves and runs: the rendered quiet-street clip (one copy per
key-frame phase, cached), the stub detector (float32 or uint8 input) and the RTSP servers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.ports import free_ports  # noqa: E402

FPS = 15
CYCLE_S, BUSY_S = 10, 2  # people in the picture BUSY_S seconds of every CYCLE_S
VTEST = "/usr/share/doc/opencv-doc/examples/data/vtest.avi"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "edgert-bench"


def render_scene(seconds: float, phase: int = 0, shift: int = 0) -> Path:
    """The 1080p, 15 fps clip, at least ``seconds`` long (whole minutes, cached): the photo,
    people in a window of it 2 s in 10. ``phase``: its key frames (after the first) come that
    many frames into each second; ``shift``: its people come that many frames later in each
    10 s (a camera whose street is busy at other moments than another's)."""
    seconds = 60 * -(-int(seconds) // 60)
    # every phase rendered alike: key frames forced, none at scene cuts
    events = f"_e{shift}" if shift else ""
    later = f"-{shift}/{FPS}" if shift else ""
    path = CACHE / f"quiet_street_1080p{FPS}_{int(seconds)}s_k{phase}{events}.mp4"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    photo = ROOT / "runtime" / "sample_data" / "images" / "china.jpg"
    scene = (
        "[0]scale=1920:1080,setsar=1[bg];[1]setpts=PTS-STARTPTS[fg];"
        f"[bg][fg]overlay=x=700:y=380:enable='lt(mod(t{later},{CYCLE_S}),{BUSY_S})'"
    )
    tmp = path.with_suffix(".part.mp4")
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-loop", "1", "-framerate", str(FPS), "-i", str(photo)]
        + ["-stream_loop", "-1", "-i", VTEST, "-filter_complex", scene, "-r", str(FPS)]
        + ["-t", str(int(seconds)), "-c:v", "libx264", "-preset", "veryfast", "-bf", "0"]
        + ["-g", str(FPS), "-sc_threshold", "0", "-force_key_frames"]
        + [f"expr:eq(n,0)+gte(n,{phase})*eq(mod(n-{phase},{FPS}),0)"]
        + ["-pix_fmt", "yuv420p", "-profile:v", "high", "-an", str(tmp)],
        check=True,
    )
    tmp.rename(path)
    return path


def sampler_detector(path: Path, uint8: bool = False, batched: bool = False) -> Path:
    """YOLOv8s's I/O with almost no work: [1, 3, 640, 640] in, [1, 6, 8400] out (boxes, two class
    scores) over its three strides (8, 16, 32). Each anchor's first score is the red value of the
    one pixel at its cell's centre above 0.995 (times 100): a real scene gives a few candidates at
    most, as a detector on a quiet street does; the second class scores 0. The pipeline around
    inference is what is measured (the model costs microseconds). ``uint8``: it takes pixels
    (0..255) and normalises the ones it samples, as an engine normalising its uint8 input on the
    GPU costs the CPU nothing (``edgert export --uint8-input`` folds the arithmetic in front of
    the whole tensor, which ONNX Runtime on this CPU pays ~1.2 ms a 640 frame for). ``batched``:
    any batch (["N", 3, 640, 640] in): the camera infers one frame of each stream per call."""
    import onnx
    from onnx import TensorProto, helper

    nodes, inits, parts, boxes = [], [], [], []
    for stride in (8, 16, 32):
        cells = 640 // stride
        name = f"s{stride}"
        for k, v in (
            ("starts", [0, 0, stride // 2, stride // 2]),
            ("steps", [1, 1, stride, stride]),
        ):
            inits.append(helper.make_tensor(f"{name}_{k}", TensorProto.INT64, [4], v))
        nodes += [
            helper.make_node(
                "Slice", ["images", f"{name}_starts", "ends", "axes", f"{name}_steps"], [name]
            ),
            helper.make_node("Reshape", [name, "flat"], [f"{name}_flat"]),
        ]
        parts.append(f"{name}_flat")
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        centre = lambda i, s=stride: (i + 0.5) * s  # noqa: E731
        side = np.full(xs.size, 4.0 * stride)
        boxes.append(np.stack([centre(xs).ravel(), centre(ys).ravel(), side, side]))
    box = np.concatenate(boxes, axis=1)[None].astype(np.float32)  # [1, 4, 8400]
    inits += [
        helper.make_tensor("ends", TensorProto.INT64, [4], [2**62, 1, 640, 640]),
        helper.make_tensor("axes", TensorProto.INT64, [4], [0, 1, 2, 3]),
        helper.make_tensor("flat", TensorProto.INT64, [3], [0, 1, -1]),  # 0: the batch as it is
        helper.make_tensor("none", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("boxes", TensorProto.FLOAT, list(box.shape), box.ravel()),
        helper.make_tensor("bright", TensorProto.FLOAT, [], [0.995]),
        helper.make_tensor("gain", TensorProto.FLOAT, [], [100.0]),
    ]
    if uint8:
        inits.append(helper.make_tensor("level", TensorProto.FLOAT, [], [1 / 255]))
    nodes += [
        helper.make_node("Concat", parts, ["red_in"], axis=2),
        *(
            [
                helper.make_node("Cast", ["red_in"], ["red_f"], to=TensorProto.FLOAT),
                helper.make_node("Mul", ["red_f", "level"], ["red"]),
            ]
            if uint8
            else [helper.make_node("Identity", ["red_in"], ["red"])]
        ),
        helper.make_node("Sub", ["red", "bright"], ["over"]),
        helper.make_node("Relu", ["over"], ["above"]),
        helper.make_node("Mul", ["above", "gain"], ["score"]),
        helper.make_node("Mul", ["score", "none"], ["other"]),  # [N, 1, 8400] zeros
        helper.make_node("Add", ["boxes", "other"], ["boxes_n"]),  # the boxes for each image
        helper.make_node("Concat", ["boxes_n", "score", "other"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "sampler",
        [
            helper.make_tensor_value_info(
                "images",
                TensorProto.UINT8 if uint8 else TensorProto.FLOAT,
                ["N" if batched else 1, 3, 640, 640],
            )
        ],
        [
            helper.make_tensor_value_info(
                "output0", TensorProto.FLOAT, ["N" if batched else 1, 6, 8400]
            )
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def stub_bundle(folder: Path, uint8: bool = False, batched: bool = False) -> Path:
    """:func:`sampler_detector` as an edgert detect bundle: letterbox to 640, two labels; 0..1
    float32 or (``uint8``) the pixels as they are."""
    from edgert.export import export_model

    name = "stub640" + ("_u8" if uint8 else "") + ("_n" if batched else "")
    onnx_path = sampler_detector(folder / f"{name}.onnx", uint8, batched)
    labels = folder / "labels.txt"
    labels.write_text("Normal\nFall\n")
    pre = {"resize": "letterbox", "size": "640x640", "interpolation": "bilinear"}
    pre["scale"] = 1.0 if uint8 else 1 / 255
    return export_model(
        str(onnx_path), folder / f"{name}.edgert", task="detect", labels=labels, preprocess=pre
    ).bundle


class Server:
    """tests/rtsp_server.py --encoded CLIP on a free port, in its own process."""

    def __init__(self, clip: Path) -> None:
        (port,) = free_ports(1)
        self.url = f"rtsp://127.0.0.1:{port}/cam"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.rtsp_server", "--port", str(port)]
            + ["--fps", str(FPS), "--encoded", str(clip)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"the RTSP server did not start: {line!r}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
