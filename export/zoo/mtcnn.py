"""MTCNN face detection (Zhang et al. 2016): our P-Net / R-Net / O-Net definitions with the trained
weights shipped in ``facenet-pytorch==2.6.0`` (``data/pnet.pt``, ``rnet.pt``, ``onet.pt``; located
with importlib.util.find_spec, never imported — the package pins ancient torch/numpy).

One bundle holds the three networks: ``model.onnx`` is P-Net (fully convolutional, dynamic height
and width, run over an image pyramid), ``rnet.onnx`` (24x24 crops) and ``onet.onnx`` (48x48 crops)
take batches of candidate crops. The manifest's ``models`` section names them; the detector lives in
``edgert.runtime.tasks.faces``.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np

from edgert.runtime import atomic, bundle
from edgert.runtime.errors import MissingDependency, ParityError, require

from .. import onnx_export
from ..parity import random_inputs, run_cases
from ..source_model import check_state_dict
from .samples import ZooSamples, augmented_crops

PIP_LINE = "pip install --no-deps facenet-pytorch==2.6.0"
PREPROCESSING = {
    "size": [-1, -1],
    "resize": "none",
    "interpolation": "area",
    "channel_order": "RGB",
    "layout": "NCHW",
    "scale": 0.0078125,  # (x - 127.5) / 128
    "mean": [0.99609375, 0.99609375, 0.99609375],  # 127.5 * 0.0078125
    "std": [1.0, 1.0, 1.0],
}


def weights_dir() -> Path:
    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None or spec.origin is None:
        raise MissingDependency(
            f"the MTCNN face detector needs the weights in facenet-pytorch: {PIP_LINE}"
        )
    folder = Path(spec.origin).parent / "data"
    if not all((folder / f"{n}.pt").is_file() for n in ("pnet", "rnet", "onet")):
        raise MissingDependency(
            f"{folder} lacks pnet.pt / rnet.pt / onet.pt; reinstall: {PIP_LINE}"
        )
    return folder


def build_nets():
    torch = require("torch", "pip install 'edgert[export]'", "the MTCNN export")
    nn = torch.nn

    class PNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
            self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
            self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
            self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
            self.conv4_1, self.conv4_2 = nn.Conv2d(32, 2, 1), nn.Conv2d(32, 4, 1)

        def forward(self, x):
            x = self.pool1(self.prelu1(self.conv1(x)))
            x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
            return torch.softmax(self.conv4_1(x), dim=1), self.conv4_2(x)

    class RNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
            self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
            self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
            self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
            self.dense5_1, self.dense5_2 = nn.Linear(128, 2), nn.Linear(128, 4)

        def forward(self, x):
            x = self.pool1(self.prelu1(self.conv1(x)))
            x = self.pool2(self.prelu2(self.conv2(x)))
            x = self.prelu3(self.conv3(x))
            x = x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)  # the trained weights' (Caffe) order
            x = self.prelu4(self.dense4(x))
            return torch.softmax(self.dense5_1(x), dim=1), self.dense5_2(x)

    class ONet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
            self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
            self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
            self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
            self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
            self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
            self.dense6_1, self.dense6_2, self.dense6_3 = (
                nn.Linear(256, 2),
                nn.Linear(256, 4),
                nn.Linear(256, 10),
            )

        def forward(self, x):
            x = self.pool1(self.prelu1(self.conv1(x)))
            x = self.pool2(self.prelu2(self.conv2(x)))
            x = self.pool3(self.prelu3(self.conv3(x)))
            x = self.prelu4(self.conv4(x))
            x = x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)
            x = self.prelu5(self.dense5(x))
            return torch.softmax(self.dense6_1(x), dim=1), self.dense6_2(x), self.dense6_3(x)

    folder = weights_dir()
    nets = {}
    for name, cls in (("pnet", PNet), ("rnet", RNet), ("onet", ONet)):
        net = cls()
        state = torch.load(folder / f"{name}.pt", map_location="cpu", weights_only=True)
        check_state_dict(net, state, str(folder / f"{name}.pt"))
        net.load_state_dict(state)
        nets[name] = net.eval()
    return nets


# name -> (file, example input shape, output names, extra dynamic axes)
LAYOUT = {
    "pnet": (
        "model.onnx",
        (1, 3, 48, 64),
        ["prob", "reg"],
        {"input": {2: "height", 3: "width"}, "prob": {2: "oh", 3: "ow"}, "reg": {2: "oh", 3: "ow"}},
    ),
    "rnet": ("rnet.onnx", (1, 3, 24, 24), ["prob", "reg"], {}),
    "onet": ("onet.onnx", (1, 3, 48, 48), ["prob", "reg", "landmarks"], {}),
}


def export_mtcnn(out: str | Path, atol: float = 1e-4, rtol: float = 1e-3) -> tuple[Path, dict]:
    """Export the three networks into one bundle; parity of each against PyTorch (P-Net at two
    pyramid sizes). Nothing is written unless all pass."""

    torch = require("torch", "pip install 'edgert[export]'", "the MTCNN export")
    start = time.perf_counter()
    nets = build_nets()
    files, reports, specs = {}, {}, {}
    for name, (filename, shape, outputs, axes) in LAYOUT.items():
        model = onnx_export.torch_to_onnx(
            torch, nets[name], [shape], ["input"], outputs, dynamic_batch=True, dynamic_axes=axes
        )
        sess = onnx_export.cpu_session(model)

        def reference(feeds, net=nets[name]):
            return onnx_export.run_module(torch, net, (torch.from_numpy(feeds[0]),))

        def candidate(feeds, sess=sess, outputs=outputs):
            return sess.run(outputs, {"input": feeds[0]})

        cases = [
            ("random, batch 1", random_inputs([shape], 1, seed=1)),
            ("random, batch 3", random_inputs([shape], 3, seed=2)),
        ]
        if name == "pnet":
            cases.append(
                (
                    "random 1x3x97x131",
                    [np.random.default_rng(3).standard_normal((1, 3, 97, 131)).astype(np.float32)],
                )
            )
        report = run_cases(reference, candidate, outputs, cases, atol, rtol)
        if not report.passed:
            raise ParityError(
                f"MTCNN {name}: ONNX differs from PyTorch (max abs {report.max_abs:.3e}); nothing was written",
                report,
            )
        files[name] = model.SerializeToString()
        reports[name] = report
        specs[name] = {
            "file": filename,
            "inputs": [s.to_dict() for s in onnx_export.tensor_specs(model.graph.input, model)],
            "outputs": [s.to_dict() for s in onnx_export.tensor_specs(model.graph.output, model)],
        }
    folder = weights_dir()
    manifest = {
        "format": bundle.FORMAT,
        "name": "mtcnn",
        "task": "faces",
        "inputs": specs["pnet"]["inputs"],
        "outputs": specs["pnet"]["outputs"],
        "preprocessing": PREPROCESSING,
        "labels": ["face"],
        "models": specs,
        "detector": {"min_face": 20, "thresholds": [0.6, 0.7, 0.7], "factor": 0.709},
        "source": {"kind": "zoo", "spec": "zoo:mtcnn"},
        "hashes": {
            **{f"weights/{n}.pt": bundle.sha256_file(folder / f"{n}.pt") for n in LAYOUT},
            **{spec["file"]: bundle.sha256_bytes(files[n]) for n, spec in specs.items()},
        },
        "export": {
            "opset": onnx_export.DEFAULT_OPSET,
            "dynamic_batch": True,
            "batch": {"min": 1, "opt": 1, "max": 256},
            "seconds": round(time.perf_counter() - start, 3),
        },
        "parity": reports["pnet"].to_dict(),
        "parity_all": {n: r.to_dict() for n, r in reports.items()},
        "tools": onnx_export.tool_versions(),
    }
    target = Path(out)
    with atomic.staged_directory(target) as stage:
        for name, data in files.items():
            atomic.write_bytes(stage / specs[name]["file"], data)
        bundle.write_manifest(stage, manifest)
        (stage / bundle.ENGINES).mkdir()
    return target, reports


def export(out, atol: float = 1e-4, rtol: float = 1e-3) -> tuple[Path, dict]:
    """The zoo's exporter for this entry: (bundle, P-Net's parity report)."""
    path, reports = export_mtcnn(out or "mtcnn.edgert", atol, rtol)
    return path, reports["pnet"]


def calibration_samples(calib_size: int, holdout_size: int, seed: int) -> ZooSamples:
    """Whole images for the detector: random crops, flips and colour jitter of the bundled
    photos, half of them of the one with a face (astronaut)."""
    from edgert.runtime.sample_data import ALL_PHOTOS, load_photo

    face = [load_photo("astronaut")]
    others = [load_photo(p) for p in ALL_PHOTOS if p != "astronaut"]

    def crops(n: int, offset: int) -> list[np.ndarray]:
        half = n // 2
        return augmented_crops(face, half, seed=offset + seed) + augmented_crops(
            others, n - half, seed=offset + 1 + seed
        )

    what = f"random crops/flips/colour jitter of the {1 + len(others)} bundled photos (half of the face photo)"
    return ZooSamples(crops(calib_size, 3000), crops(holdout_size, 4000), what, what, what)
