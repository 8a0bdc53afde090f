"""Small PyTorch models built by the tests (also importable as factories: module:function)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class SmallConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ResidualConcatUpsample(nn.Module):
    """A U-Net-like block: residual add, channel concat, nearest and bilinear upsampling."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.res = nn.Sequential(
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1)
        )
        self.head = nn.Conv2d(8 + 16 + 16, 4, 1)

    def forward(self, x):
        s = F.relu(self.stem(x))
        d = F.relu(self.down(s))
        d = d + self.res(d)
        up_n = F.interpolate(d, scale_factor=2, mode="nearest")
        up_b = F.interpolate(d, size=s.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([s, up_n, up_b], dim=1))


class TinyAttention(nn.Module):
    """Token embedding + multi-head self-attention + layer norm + pooled classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 32)
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 3)

    def forward(self, x):
        h = self.proj(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        h = self.norm(h + a)
        return self.fc(h.mean(dim=1))


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.body(x)
        return y.mean(dim=(2, 3)), torch.sigmoid(y)


class DriftsAfterTracing(nn.Module):
    """Counts its calls and scales by the count: the ONNX trace bakes one value in, so a later
    PyTorch call disagrees — a real parity failure."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x) * float(self.calls)


class GridSample(nn.Module):
    def forward(self, x):
        grid = torch.zeros(x.shape[0], 4, 4, 2)
        return F.grid_sample(x, grid, align_corners=False)


class Eigh(nn.Module):
    def forward(self, x):
        return torch.linalg.eigh(x @ x.transpose(-1, -2))[0]


def build():
    torch.manual_seed(0)
    return SmallConv().eval()


def build_two_heads():
    torch.manual_seed(0)
    return TwoHeads().eval()


def build_not_a_module():
    return {"not": "a module"}


def build_drifting():
    torch.manual_seed(0)
    return DriftsAfterTracing().eval()


def build_grid_sample():
    return GridSample().eval()


def build_eigh():
    return Eigh().eval()


def build_unet_block():
    torch.manual_seed(0)
    return ResidualConcatUpsample().eval()


def build_attention():
    torch.manual_seed(0)
    return TinyAttention().eval()


class TinyDetector(nn.Module):
    """A YOLOv8-shaped head with fixed predictions ([1, 4 + 2 classes, 3 anchors]); the input only
    flows through a zero-weighted term, so the model is a real graph with known detections."""

    def __init__(self) -> None:
        super().__init__()
        preds = torch.tensor(
            [
                [32.0, 33.0, 10.0],  # cx
                [32.0, 32.0, 40.0],  # cy
                [16.0, 16.0, 8.0],  # w
                [16.0, 16.0, 8.0],  # h
                [0.9, 0.8, 0.05],  # class 0 score
                [0.1, 0.1, 0.7],  # class 1 score
            ]
        )
        self.register_buffer("preds", preds[None])

    def forward(self, x):
        return self.preds + 0.0 * x.mean()


def build_tiny_detector():
    return TinyDetector().eval()


class SensitiveLayer(nn.Module):
    """One channel carries values ~1000x the others into conv2 and conv2 scales it back down: a
    per-tensor INT8 range for conv2's input then crushes the seven small channels. Quantizing conv2
    ruins the output; keeping just it in FP32 fixes it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(8, 4, 1, bias=False)
        gain = torch.ones(1, 8, 1, 1)
        gain[0, 0] = 1000.0
        self.register_buffer("gain", gain)
        with torch.no_grad():
            self.conv2.weight[:, 0] /= 1000.0

    def forward(self, x):
        h = torch.relu(self.conv1(x)) * self.gain
        return self.conv3(torch.relu(self.conv2(h)))


def build_sensitive():
    return SensitiveLayer().eval()


class TransposedYoloHead(nn.Module):
    """A small convolutional detector with the head some exporters write: [N, anchors, 4 + nc]
    (64 anchors on an 8x8 grid of a 32x32 input, 3 classes). Class 0 never fires (its logits sit
    near -12), so a decoder that takes the 64 x 7 head for YOLOv5 ([N, anchors, 5 + nc], column 4
    the objectness) finds no boxes at all, while classes 1 and 2 fire all over the grid.
    ``silent``: no class ever fires."""

    def __init__(self, silent: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.body = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Conv2d(16, 7, 1)
        with torch.no_grad():
            self.head.bias[4:] = -12.0 if silent else self.head.bias[4:].clone()
            self.head.bias[4] = -12.0
        ys, xs = torch.meshgrid(torch.arange(8.0), torch.arange(8.0), indexing="ij")
        self.register_buffer("grid", torch.stack([xs, ys]).reshape(1, 2, 64))

    def forward(self, x):
        h = self.head(torch.relu(self.body(torch.relu(self.stem(x))))).flatten(2)  # [N, 7, 64]
        centre = (self.grid + torch.sigmoid(h[:, :2])) * 4.0
        size = torch.exp(h[:, 2:4].clamp(-2, 2)) * 6.0
        out = torch.cat([centre, size, torch.sigmoid(h[:, 4:])], dim=1)
        return out.transpose(1, 2)


def build_transposed_yolo():
    return TransposedYoloHead().eval()


def build_silent_yolo():
    return TransposedYoloHead(silent=True).eval()


class YoloStyle(nn.Module):
    """A YOLOv8-style detector on a 32x32 input: two scales (strides 4 and 8: 64 + 16 anchors),
    per scale a box branch (4 distances x 8 DFL bins) and a class branch (3 classes), each ending
    in a 1x1 convolution; DFL (softmax over the bins, a fixed 1x1 convolution for the
    expectation), anchors and strides, the sigmoid; [N, 4 + 3, 80] as Ultralytics exports it.
    ``fragile``: the feature into the second scale's convolution (``p4``) carries one channel
    ~1000x the others (p4 scales it back), so a per-tensor INT8 range on p4's input crushes the
    rest: quantizing p4 alone moves the second scale's boxes; no other layer reads that tensor."""

    def __init__(self, fragile: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.reg, self.nc = 8, 3
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.p3 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.p4 = nn.Conv2d(16, 16, 3, stride=2, padding=1)

        def branch(out: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, out, 1))

        self.cv2 = nn.ModuleList(branch(4 * self.reg) for _ in range(2))
        self.cv3 = nn.ModuleList(branch(self.nc) for _ in range(2))
        self.dfl = nn.Conv2d(self.reg, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(self.reg, dtype=torch.float32).view(1, -1, 1, 1)
        gain = torch.ones(1, 16, 1, 1)
        if fragile:
            gain[0, 0] = 1000.0
            with torch.no_grad():
                self.p4.weight[:, 0] /= 1000.0
        self.register_buffer("gain", gain)
        anchors, strides = [], []
        for side, stride in ((8, 4.0), (4, 8.0)):
            ys, xs = torch.meshgrid(
                torch.arange(side) + 0.5, torch.arange(side) + 0.5, indexing="ij"
            )
            anchors.append(torch.stack([xs, ys]).reshape(2, -1))
            strides.append(torch.full((1, side * side), stride))
        self.register_buffer("anchors", torch.cat(anchors, 1)[None])
        self.register_buffer("strides", torch.cat(strides, 1)[None])

    def forward(self, x):
        h3 = torch.relu(self.p3(torch.relu(self.stem(x))))
        h4 = torch.relu(self.p4(h3 * self.gain))
        b = x.shape[0]
        per_scale = [
            torch.cat([self.cv2[i](h), self.cv3[i](h)], 1).view(b, 4 * self.reg + self.nc, -1)
            for i, h in enumerate((h3, h4))
        ]
        box, cls = torch.cat(per_scale, 2).split((4 * self.reg, self.nc), 1)
        a = box.shape[2]
        dist = self.dfl(box.view(b, 4, self.reg, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        dbox = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * self.strides
        return torch.cat([dbox, torch.sigmoid(cls)], 1)


def build_yolo_style():
    return YoloStyle().eval()


def build_fragile_yolo_style():
    return YoloStyle(fragile=True).eval()
