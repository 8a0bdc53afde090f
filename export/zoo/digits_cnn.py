"""A small CNN trained deterministically on scikit-learn's digits (1797 real 8x8 scans).

Fixed seed, fixed 80/20 split, CPU training in a few seconds; the trained weights are cached under
``$EDGERT_CACHE_DIR`` (default ``~/.cache/edgert``) so later exports reuse them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import numpy as np

from edgert.runtime import atomic
from edgert.runtime.bundle import sha256_bytes
from edgert.runtime.errors import require

from ..source_model import SourceModel
from .samples import ZooSamples

RECIPE = {
    "version": 2,  # 2: the initial weights are seeded too
    "seed": 0,
    "split_seed": 0,
    "test_fraction": 0.2,
    "epochs": 30,
    "batch": 32,
    "lr": 2e-3,
}
PREPROCESSING_DICT = {
    "size": [8, 8],
    "resize": "stretch",
    "interpolation": "area",
    "channel_order": "GRAY",
    "layout": "NCHW",
    "scale": 1.0 / 16.0,  # digits pixels are 0..16
    "mean": [0.5],
    "std": [0.5],
}
CLASSES = [str(d) for d in range(10)]


def cache_dir() -> Path:
    return Path(os.environ.get("EDGERT_CACHE_DIR", Path.home() / ".cache" / "edgert"))


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_images, train_labels, test_images, test_labels); images are float 0..16, Nx8x8."""
    require("sklearn", "pip install 'edgert[export]'", "zoo:digits_cnn")
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(RECIPE["split_seed"]).permutation(len(images))
    n_test = round(len(images) * RECIPE["test_fraction"])
    test, train = order[:n_test], order[n_test:]
    return images[train], labels[train], images[test], labels[test]


def normalise(images: np.ndarray) -> np.ndarray:
    """Nx8x8 raw digits -> Nx1x8x8 model input, exactly what the manifest's preprocessing does."""
    x = images.astype(np.float32) * np.float32(PREPROCESSING_DICT["scale"])
    return ((x - 0.5) / 0.5)[:, None, :, :]


def build():
    torch = require("torch", "pip install 'edgert[export]'", "zoo:digits_cnn")
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 2 * 2, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float((np.argmax(logits, axis=1) == labels).mean())


def train(model, x_train: np.ndarray, y_train: np.ndarray) -> None:
    torch = require("torch", "pip install 'edgert[export]'", "zoo:digits_cnn")
    # one thread and deterministic kernels: multi-threaded reductions reorder float sums, and the
    # trained weights (and the recorded accuracy) would differ from run to run
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        _train(torch, model, x_train, y_train)
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
    model.eval()


def _train(torch, model, x_train: np.ndarray, y_train: np.ndarray) -> None:
    torch.manual_seed(RECIPE["seed"])
    gen = torch.Generator().manual_seed(RECIPE["seed"])
    xs, ys = torch.from_numpy(x_train), torch.from_numpy(y_train)
    opt = torch.optim.Adam(model.parameters(), lr=RECIPE["lr"])
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    for _ in range(RECIPE["epochs"]):
        perm = torch.randperm(len(xs), generator=gen)
        for i in range(0, len(xs), RECIPE["batch"]):
            idx = perm[i : i + RECIPE["batch"]]
            opt.zero_grad()
            loss_fn(model(xs[idx]), ys[idx]).backward()
            opt.step()


def load() -> SourceModel:
    torch = require("torch", "pip install 'edgert[export]'", "zoo:digits_cnn")
    x_train, y_train, x_test, y_test = dataset()
    x_train, x_test = normalise(x_train), normalise(x_test)
    with torch.random.fork_rng():  # seeded initial weights, without touching the caller's RNG
        torch.manual_seed(RECIPE["seed"])
        model = build()
    recipe_key = sha256_bytes(json.dumps(RECIPE, sort_keys=True).encode())[:12]
    cached = cache_dir() / f"digits_cnn-{recipe_key}.pt"
    state = None
    if cached.is_file():
        try:
            state = torch.load(cached, map_location="cpu", weights_only=True)
            model.load_state_dict(state)
        except Exception:  # a stale or damaged cache entry: retrain below
            state = None
    if state is None:
        with torch.random.fork_rng():
            train(model, x_train, y_train)
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        # the cache is an optimisation: an unwritable home is not an error
        with contextlib.suppress(Exception):
            atomic.write_bytes(cached, buf.getvalue())
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(x_test)).numpy()
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    from edgert.runtime.images.preprocess import Preprocessing

    return SourceModel(
        name="digits_cnn",
        kind="zoo",
        spec="zoo:digits_cnn",
        module=model,
        input_shapes=[(1, 1, 8, 8)],
        input_names=["input"],
        output_names=["logits"],
        task="classify",
        preprocessing=Preprocessing.from_dict(PREPROCESSING_DICT),
        labels=CLASSES,
        samples=x_test[:32],
        hashes={"weights": sha256_bytes(buf.getvalue())},
        metrics={
            "dataset": "scikit-learn digits (1797 images), seeded 80/20 split",
            "train_samples": int(len(x_train)),
            "test_samples": int(len(x_test)),
            "test_accuracy": accuracy(logits, y_test),
            "recipe": RECIPE,
        },
    )


def calibration_samples(calib_size: int, holdout_size: int, seed: int) -> ZooSamples:
    """Training images to calibrate, labelled test images to evaluate (model inputs)."""
    x_train, _, x_test, y_test = dataset()
    rng = np.random.default_rng(seed)
    cal = normalise(x_train[rng.permutation(len(x_train))[:calib_size]])
    hold_idx = rng.permutation(len(x_test))[:holdout_size]
    return ZooSamples(
        cal,
        normalise(x_test[hold_idx]),
        f"{len(cal)} scikit-learn digits training images",
        f"{len(hold_idx)} labelled test images",
        "zoo:digits_cnn data",
        preprocessed=True,
        labels=y_test[hold_idx],
    )
