"""A batched constant-velocity Kalman filter of boxes, in pixels and pixels per *second*: the
prediction uses the real time since the frame before, and its process noise grows with it (a
track that skipped two frames is predicted two frames ahead, with a wider gate). Trackers build on
it (:mod:`edgert.runtime.tracking`); it knows nothing of association."""

from __future__ import annotations

import numpy as np

# noise as fractions of the box height (ByteTrack's at 30 fps, turned into per-second units)
_POS_STD = 1.0 / 20  # measurement and position process noise, per frame at 30 fps
_VEL_STD = 1.0 / 160 * 30  # velocity process noise, per second
_REF_DT = 1.0 / 30


def _cxcywh(boxes: np.ndarray) -> np.ndarray:
    """[N, 4] x1, y1, x2, y2 -> centre, size (at least a pixel)."""
    w = np.maximum(boxes[:, 2] - boxes[:, 0], 1.0)
    h = np.maximum(boxes[:, 3] - boxes[:, 1], 1.0)
    return np.stack([boxes[:, 0] + w / 2, boxes[:, 1] + h / 2, w, h], axis=1)


def _xyxy(x: np.ndarray) -> np.ndarray:
    """Filter states [N, 8] -> boxes [N, 4] x1, y1, x2, y2."""
    cx, cy, w, h = x[:, 0], x[:, 1], x[:, 2], x[:, 3]
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


class KalmanBoxes:
    """Constant-velocity Kalman filters of many boxes at once: states (cx, cy, w, h) and their
    velocities in pixels per second, ``x`` [N, 8] and covariances ``P`` [N, 8, 8]. ``predict(dt)``
    moves every box ``dt`` seconds ahead (the noise grows with ``dt``); ``update`` corrects some."""

    def __init__(self) -> None:
        self.x = np.zeros((0, 8))
        self.P = np.zeros((0, 8, 8))

    def add(self, boxes: np.ndarray) -> None:
        z = _cxcywh(np.asarray(boxes, dtype=np.float64).reshape(-1, 4))
        x = np.concatenate([z, np.zeros_like(z)], axis=1)
        h = z[:, 3:4]
        std = np.concatenate(
            [np.repeat(2 * _POS_STD * h, 4, 1), np.repeat(10 * _VEL_STD * h, 4, 1)], 1
        )
        P = np.zeros((len(z), 8, 8))
        P[:, np.arange(8), np.arange(8)] = std**2
        self.x = np.concatenate([self.x, x])
        self.P = np.concatenate([self.P, P])

    def keep(self, mask) -> None:
        self.x, self.P = self.x[mask], self.P[mask]

    def predict(self, dt: float) -> None:
        if not len(self.x):
            return
        dt = max(0.0, float(dt))
        F = np.eye(8)
        F[:4, 4:] = np.eye(4) * dt
        h = np.maximum(self.x[:, 3:4], 1.0)
        steps = max(dt / _REF_DT, 1e-6)  # noise accumulates with elapsed time (a random walk)
        q = (
            np.concatenate(
                [np.repeat((_POS_STD * h) ** 2, 4, 1), np.repeat((_VEL_STD * h) ** 2, 4, 1)], 1
            )
            * steps
        )
        self.x = self.x @ F.T
        self.x[:, 2:4] = np.maximum(self.x[:, 2:4], 1.0)
        self.P = F @ self.P @ F.T
        self.P[:, np.arange(8), np.arange(8)] += q

    def update(self, idx, boxes: np.ndarray) -> None:
        """Correct filters ``idx`` with measured boxes [len(idx), 4] (x1, y1, x2, y2)."""
        if not len(idx):
            return
        z = _cxcywh(np.asarray(boxes, dtype=np.float64).reshape(-1, 4))
        x, P = self.x[idx], self.P[idx]
        S = P[:, :4, :4].copy()
        S[:, np.arange(4), np.arange(4)] += (_POS_STD * z[:, 3:4]) ** 2
        K = np.linalg.solve(S, P[:, :4, :]).transpose(0, 2, 1)  # [m, 8, 4] (S is symmetric)
        self.x[idx] = x + (K @ (z - x[:, :4])[:, :, None])[:, :, 0]
        self.P[idx] = P - K @ P[:, :4, :]

    def boxes(self) -> np.ndarray:
        return _xyxy(self.x)
