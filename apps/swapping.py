"""What ``edgert camera`` and ``edgert serve`` share to take a new model while running: the
options (``--watch-model``, ``--model-endpoint``, ``--allow-models``, ``--swap-check``), what
names a model (:func:`model_info`: name, version, a hash of what runs), the shadow check's
measures (:func:`agreement`, :func:`judge`: those of the INT8 gate) and giving memory back after
a model is closed. The camera's swap is ``camera/swap.py``; Triton's is ``serve_swap.py``."""

from __future__ import annotations

import collections
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from edgert.runtime.errors import ModelError

EVENTS = ("model_swap", "model_swap_refused", "model_rollback")


@dataclass(frozen=True)
class SwapOptions:
    """How a running camera takes a new model (see the module's text)."""

    watch: bool = False  # --watch-model: the bundle path polled for a change
    endpoint: bool = False  # --model-endpoint: POST /model
    allow: tuple = ()  # --allow-models: folders POST /model may name (default: the bundle's)
    check: bool = False  # --swap-check
    check_frames: int = 20
    min_agreement: float = 0.9  # classifiers: top-1 agreement
    min_box_f1: float = 0.8  # detectors: box F1
    rollback_s: float = 30.0  # 0: no watch after a swap
    rollback_below: float = 0.5
    poll_s: float = 2.0

    @staticmethod
    def add_arguments(
        parser,
        what: str = "the bundle path",
        port: str = "the --metrics / web viewer port",
        sample: str = "live frames",
        rollback: bool = True,
    ) -> None:
        g = parser.add_argument_group(f"model hot-swap (SIGHUP always re-reads {what})")
        g.add_argument(
            "--watch-model",
            action="store_true",
            help=f"swap to the bundle at {what} whenever it changes (polled every 2 s)",
        )
        g.add_argument(
            "--model-endpoint",
            action="store_true",
            help=f'POST /model {{"bundle": PATH}} on {port} swaps to that '
            "bundle (off unless given; GET /model says what runs)",
        )
        g.add_argument(
            "--allow-models",
            action="append",
            default=[],
            metavar="DIR",
            help="a folder whose bundles POST /model may name (repeatable; default: the "
            "running bundles' folders)",
        )
        g.add_argument(
            "--swap-check",
            action="store_true",
            help=f"run a candidate on {sample} beside the model in use and promote it only "
            "when they agree (top-1 agreement >= 0.9, box F1 >= 0.8)",
        )
        if not rollback:
            return
        g.add_argument(
            "--rollback-window",
            type=float,
            default=30.0,
            metavar="S",
            help="after a swap, watch each label's detection rate and confidence for S seconds "
            "(default 30; 0: off) and put the old model back if one collapses",
        )
        g.add_argument(
            "--rollback-below",
            type=float,
            default=0.5,
            metavar="F",
            help="a collapse: a label's rate or mean confidence under F times the old model's "
            "(default 0.5)",
        )

    @classmethod
    def from_args(cls, args) -> SwapOptions:
        window = getattr(args, "rollback_window", 0.0)  # edgert serve: no rollback watch
        below = getattr(args, "rollback_below", 0.5)
        if not 0 < below < 1 or window < 0:
            raise ModelError("--rollback-below is between 0 and 1, --rollback-window >= 0 s")
        return cls(
            watch=args.watch_model,
            endpoint=args.model_endpoint,
            allow=tuple(args.allow_models),
            check=args.swap_check,
            rollback_s=window,
            rollback_below=below,
        )


def _hash_file(digest, path: Path) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def model_info(path: str | Path) -> dict:
    """What names a model: the bundle's name, its version (the manifest's ``version``, else when
    it was exported) and a hash of what runs: its manifest and the network files it names (not
    the plans cached beside them), so a bundle whose model was replaced under the same manifest
    is another model; for a bare .onnx / .engine file, its name and contents' hash. ModelError
    when it cannot be read."""
    p = Path(path)
    try:
        digest = hashlib.sha256()
        if not p.is_dir():
            _hash_file(digest, p)
            return {"name": p.stem, "version": "", "hash": digest.hexdigest()[:12]}
        raw = (p / "manifest.json").read_bytes()
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("its manifest.json is not a JSON object")
        digest.update(raw)
        named = sorted(str(k) for k in (data.get("hashes") or {}) if k != "source")
        for name in named or ["model.onnx"]:
            if (p / name).is_file() and (p / name).resolve().parent == p.resolve():
                digest.update(name.encode() + b"\0")
                _hash_file(digest, p / name)
        return {
            "name": str(data.get("name") or p.stem),
            "version": str(data.get("version") or data.get("created") or ""),
            "hash": digest.hexdigest()[:12],
        }
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ModelError(f"cannot read the bundle {path}: {why}") from None


def fingerprint(path: str) -> tuple:
    """What changes when a deployment tool replaces the bundle at ``path``."""
    real = os.path.realpath(path)
    out: list = [real]
    for name in ("", "manifest.json"):
        try:
            st = os.stat(os.path.join(real, name) if name else real)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class Loaded:
    """A model in the run: the task model, what names it, its frames in flight (prepared for it,
    not yet finished) and its recent results per label (what a rollback compares)."""

    def __init__(self, model, info: dict, path: str) -> None:
        self.model, self.info, self.path = model, info, str(path)
        self.label = f"{info['name']}@{info['version']}#{info['hash']}"
        self.in_flight = 0
        self.recent: collections.deque = collections.deque()  # (t, [(label, score), ...])
        self.closed = False

    def describe(self) -> dict:
        return {**self.info, "label": self.label, "path": self.path}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.model.close()


def agreement(task: str, ref: list, got: list) -> dict:
    """How a candidate's results ``got`` agree with the model in use's ``ref`` on the same frames
    (lists of per-frame results): top-1 agreement (classifiers) or box F1 (detectors), and per
    label the ratio of the candidate's detections to the current model's."""
    from edgert.runtime.detection import matched_boxes

    out: dict = {"frames": len(ref)}
    if task == "classify":
        same = [
            bool(r) and bool(g) and r[0].get("label") == g[0].get("label") for r, g in zip(ref, got)
        ]
        out["agreement"] = sum(same) / max(1, len(same))
        return out
    matched = total_ref = total_got = 0
    per = collections.defaultdict(lambda: [0, 0])
    for r, g in zip(ref, got):
        r = [d for d in r or [] if "box" in d]
        g = [d for d in g or [] if "box" in d]
        total_ref, total_got = total_ref + len(r), total_got + len(g)
        for d in r:
            per[str(d.get("label"))][0] += 1
        for d in g:
            per[str(d.get("label"))][1] += 1
        boxes_r, boxes_g = [d["box"] for d in r], [d["box"] for d in g]
        labels_r, labels_g = [d.get("label") for d in r], [d.get("label") for d in g]
        matched += matched_boxes(boxes_r, labels_r, boxes_g, labels_g)
    out["box_f1"] = 2 * matched / (total_ref + total_got) if total_ref + total_got else 1.0
    out["boxes_per_frame"] = total_ref / max(1, len(ref))
    out["rate_ratio"] = {k: round(n[1] / n[0], 3) for k, n in per.items() if n[0] >= 3}
    return out


def refuse_to_compare(current, candidate) -> str | None:
    """Why a candidate cannot be checked against the model in use (another task, no class in
    common), or None."""
    if candidate.task != current.task:
        return f"a {candidate.task} model cannot be checked against a {current.task} one"
    mine, theirs = getattr(current, "labels", None), getattr(candidate, "labels", None)
    if mine and theirs and not set(mine) & set(theirs):
        return "the candidate's classes are none of the model in use's: nothing to compare"
    return None


def judge(task: str, measures: dict, o: SwapOptions, what: str) -> str | None:
    """Why :func:`agreement`'s ``measures`` on ``what`` (live frames, requests' images) refuse a
    candidate under the bounds of ``o``, or None."""
    n = measures["frames"]
    if task == "classify":
        if measures["agreement"] < o.min_agreement:
            return (
                f"the candidate agrees with the model in use on {measures['agreement']:.0%} of "
                f"{n} {what} (top-1), under {o.min_agreement:.0%}"
            )
    elif measures["box_f1"] < o.min_box_f1:
        return (
            f"the candidate's boxes match the model in use's with F1 {measures['box_f1']:.2f} "
            f"on {n} {what}, under {o.min_box_f1:.2f}"
        )
    else:
        off = {k: r for k, r in measures.get("rate_ratio", {}).items() if not 0.5 <= r <= 2}
        if off:
            label, r = next(iter(off.items()))
            return f"the candidate detects {label} {r:.2f} times as often as the model in use"
    return None


def give_back_memory() -> None:
    """glibc keeps what a closed model freed in its arenas, so the process would stay as large as
    with two models; ``malloc_trim(0)`` returns it to the system (MobileNetV2 on ONNX Runtime:
    173 MB after a swap without it, 119 MB with it, one model 135 MB). Nothing elsewhere."""
    import ctypes

    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)


def json_answer(code: int, data: dict) -> tuple[int, bytes, str]:
    return code, json.dumps(data, default=str).encode() + b"\n", "application/json"
