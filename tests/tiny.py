"""Tiny real ONNX models and bundles, built node by node for tests that need a model but not a
trained one (they run in milliseconds on ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
B = np.array([0.5, -1.0, 0.0], np.float32)


def matmul_model(path: Path, batch: int | str = "N") -> Path:
    """y = relu(x @ W + b), x: float32[batch, 4] -> y: float32[batch, 3]."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["z"]),
            helper.make_node("Relu", ["z"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        initializer=[
            helper.make_tensor("W", TensorProto.FLOAT, W.shape, W.ravel()),
            helper.make_tensor("b", TensorProto.FLOAT, B.shape, B),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return Path(path)


def matmul_reference(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W + B, 0)


def image_classifier(path: Path, size: int = 16, classes: int = 3) -> Path:
    """x: float32[N, 3, size, size] -> conv 3x3 -> relu -> global pool -> gemm -> logits[N, classes]."""
    rng = np.random.default_rng(0)
    cw = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2
    gw = rng.standard_normal((classes, 4)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["g"]),
            helper.make_node("Flatten", ["g"], ["f"]),
            helper.make_node("Gemm", ["f", "gw"], ["logits"], transB=1),
        ],
        "tiny_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        initializer=[
            helper.make_tensor("cw", TensorProto.FLOAT, cw.shape, cw.ravel()),
            helper.make_tensor("gw", TensorProto.FLOAT, gw.shape, gw.ravel()),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return Path(path)


def classifier_bundle(folder: Path, name: str = "tiny", size: int = 16, **options) -> Path:
    """An edgert bundle of :func:`image_classifier` with labels and resize_crop preprocessing."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = image_classifier(folder / f"{name}.onnx", size)
    labels = folder / "labels.txt"
    labels.write_text("cat\ndog\nbird\n")
    pre = {"resize": "resize_crop", "size": f"{size}x{size}"}
    pre.update(options)
    return export_model(
        str(onnx_path), folder / f"{name}.edgert", task="classify", labels=labels, preprocess=pre
    ).bundle


COLOURS = ("red", "green", "blue")


def colour_classifier_bundle(folder: Path, size: int = 16, batch: int | str = "N") -> Path:
    """A real classifier without training, for second-stage tests: the crop's mean colour,
    classes red, green, blue (logits 10 x each channel's mean less the mean of the three), with
    stretch preprocessing to ``size`` (RGB, 0..1)."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    w = (10 * (np.eye(3) - 1 / 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["x"], ["g"]),
            helper.make_node("Flatten", ["g"], ["f"]),
            helper.make_node("Gemm", ["f", "w"], ["logits"], transB=1),
        ],
        "colour_classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())],
    )
    path = folder / "colours.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    labels = folder / "labels.txt"
    labels.write_text("\n".join(COLOURS) + "\n")
    pre = {"resize": "stretch", "size": f"{size}x{size}", "scale": 1 / 255}
    return export_model(
        str(path), folder / "colours.edgert", task="classify", labels=labels, preprocess=pre
    ).bundle


# a person's 17 keypoints (COCO's order) in a unit box (-0.5..0.5 across, down); the ears are
# given visibility 0.1 (hidden), the rest 0.9
FIGURE = (
    (0.0, -0.4),
    (-0.05, -0.45),
    (0.05, -0.45),
    (-0.1, -0.42),
    (0.1, -0.42),
    (-0.2, -0.25),
    (0.2, -0.25),
    (-0.3, -0.05),
    (0.3, -0.05),
    (-0.35, 0.1),
    (0.35, 0.1),
    (-0.15, 0.1),
    (0.15, 0.1),
    (-0.15, 0.3),
    (0.15, 0.3),
    (-0.15, 0.45),
    (0.15, 0.45),
)
FIGURE_SEEN = tuple(0.1 if k in (3, 4) else 0.9 for k in range(17))
ANGLE = 0.3  # radians: every oriented box of blob_detector(head="obb")


def blob_detector(
    path: Path,
    height: int = 96,
    width: int = 128,
    cell: int = 4,
    window: int = 6,
    head: str = "detect",
    ultralytics: bool = False,
) -> Path:
    """A real detector without training: one class ("blob"), a YOLOv8 head [N, 5, anchors]. One
    anchor per ``cell``-pixel cell: a square of ``window`` cells; its score is the mean brightness
    of the frame under it (grey mean pooled per cell, then over the window), so a bright square of
    the anchor's size on a dark frame scores 1 where it is (to a cell) and NMS keeps that one.

    ``head="pose"`` adds Ultralytics' pose channels: 17 keypoints x (x, y, visibility) per anchor,
    :data:`FIGURE` placed in its box. ``head="segment"`` adds one mask coefficient (1) per
    anchor and a second output, the prototype [1, 1, H/4, W/4]: the frame's brightness per 4x4
    cell less 0.5, so each object's mask is the bright pixels in its box. ``head="obb"``
    turns each box by :data:`ANGLE` (its last channel). ``ultralytics``
    writes the metadata an Ultralytics export carries (task, names, imgsz, stride, kpt_shape)."""
    gh, gw = height // cell, width // cell
    n = gh * gw
    ys, xs = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    lead = (window - 1) // 2  # the window covers cells i - lead .. i - lead + window - 1
    centre = lambda i: (i - lead + window / 2) * cell  # noqa: E731
    side = np.full(xs.shape, float(window * cell))
    boxes = np.stack([centre(xs), centre(ys), side, side]).reshape(1, 4, n).astype(np.float32)
    parts, inits, nodes, outputs = ["boxes", "scores"], [], [], []
    if head == "pose":
        kp = np.zeros((17, 3, n), np.float32)
        for k, ((u, v), seen) in enumerate(zip(FIGURE, FIGURE_SEEN, strict=True)):
            kp[k, 0] = (centre(xs) + u * window * cell).ravel()
            kp[k, 1] = (centre(ys) + v * window * cell).ravel()
            kp[k, 2] = seen
        inits.append(helper.make_tensor("kpts", TensorProto.FLOAT, [1, 51, n], kp.ravel()))
        parts.append("kpts")
    elif head == "obb":
        inits.append(
            helper.make_tensor("angle", TensorProto.FLOAT, [1, 1, n], np.full(n, ANGLE, np.float32))
        )
        parts.append("angle")
    elif head == "segment":
        inits += [
            helper.make_tensor("coeffs", TensorProto.FLOAT, [1, 1, n], np.ones(n, np.float32)),
            helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
        ]
        parts.append("coeffs")
        nodes += [
            helper.make_node(
                "AveragePool", ["grey"], ["quarter"], kernel_shape=[4, 4], strides=[4, 4]
            ),
            helper.make_node("Sub", ["quarter", "half"], ["output1"]),
        ]
        outputs.append(
            helper.make_tensor_value_info(
                "output1", TensorProto.FLOAT, [1, 1, height // 4, width // 4]
            )
        )
    channels = 5 + {"pose": 51, "segment": 1, "obb": 1}.get(head, 0)
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["x"], ["grey"], axes=[1], keepdims=1),
            helper.make_node(
                "AveragePool", ["grey"], ["cells"], kernel_shape=[cell, cell], strides=[cell, cell]
            ),
            helper.make_node(
                "AveragePool",
                ["cells"],
                ["around"],
                kernel_shape=[window, window],
                pads=[lead, lead, window - 1 - lead, window - 1 - lead],
                count_include_pad=1,
            ),
            helper.make_node("Reshape", ["around", "flat"], ["scores"]),
            helper.make_node("Concat", parts, ["output0"], axis=1),
            *nodes,
        ],
        "blob_detector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, channels, n]), *outputs],
        initializer=[
            helper.make_tensor("boxes", TensorProto.FLOAT, boxes.shape, boxes.ravel()),
            helper.make_tensor("flat", TensorProto.INT64, [3], [1, 1, n]),
            *inits,
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if ultralytics:
        meta = {
            "author": "Ultralytics",
            "version": "8.4.0",
            "task": head,
            "stride": str(cell),
            "names": "{0: 'blob'}",
            "imgsz": str([height, width]),
        }
        if head == "pose":
            meta["kpt_shape"] = "[17, 3]"
        helper.set_model_props(model, meta)
    onnx.save(model, str(path))
    return Path(path)


def blob_detector_bundle(
    folder: Path, height: int = 96, width: int = 128, resize: str = "stretch"
) -> Path:
    """An edgert detect bundle of :func:`blob_detector` (frames resized to its input by
    ``resize``, 0..1)."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = blob_detector(folder / "blobs.onnx", height, width)
    labels = folder / "labels.txt"
    labels.write_text("blob\n")
    pre = {"resize": resize, "size": f"{height}x{width}", "scale": 1 / 255}
    return export_model(
        str(onnx_path), folder / "blobs.edgert", task="detect", labels=labels, preprocess=pre
    ).bundle


def models_bundle(
    folder: Path,
    builder: str,
    labels: tuple[str, ...] | None = None,
    task: str = "detect",
    shape: str = "1x3x32x32",
    **export,
) -> Path:
    """A bundle of one of ``tests/export/models.py``'s builders with a dynamic batch (``labels``
    written beside it for a detector; ``export``: more of export_model's options)."""
    from edgert.export import export_model

    folder.mkdir(parents=True, exist_ok=True)
    labels_file = None
    if labels:
        labels_file = folder / "labels.txt"
        labels_file.write_text("\n".join(labels) + "\n")
    return export_model(
        f"{Path(__file__).parent / 'export' / 'models.py'}:{builder}",
        folder / f"{builder}.edgert",
        input_shape=shape,
        dynamic_batch=True,
        task=task,
        labels=labels_file,
        **export,
    ).bundle
