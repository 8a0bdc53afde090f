"""What a live reload costs a running camera (issue 68): the time from the configuration file's
change to the new zone counting, and the frames lost on the cameras the change did not touch.

``edgert camera``'s run (``run_camera``, in this process) reads three live rendered scenes (a
bright square circling over a dark frame, paced at ``--fps``, dropping the oldest frame when the
pipeline is behind, as a camera does) through a real detector bundle (tests.tiny's blob
detector on ONNX Runtime), with ``--watch-config`` on its site file. ``--reloads`` times
the file is rewritten: camera 0's zone replaced by another (a new name and polygon, both
covering the picture where the square circles) and camera 2 added or removed in turn; camera 1
never changes. Each reload waits for the new zone's first ``zone_enter`` in the events file
(read every 5 ms): that is the time measured. Camera 1's frames lost: the frames its queue
dropped (``frames_dropped``: the pipeline was behind) during the reloads and, for reference, in
a run of the same length without any (a loaded machine drops some either way).

    python benchmarks/reload.py [--reloads 50] [--fps 15] [--json reports/reload.json]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402

W, H = 320, 240
ZONES = ("pen_a=0,0,320,0,320,240,0,240", "pen_b=0,0,319,0,319,239,0,239")


class Scene:
    """A live rendered camera: a bright square circling, one frame every 1/fps s (the latest
    only: a reader that is late gets the newest frame, as from a camera)."""

    description = "rendered scene"
    live = True
    note = None
    decodes = None
    scaled_from = None
    view = None

    def __init__(self, fps: float, phase: float) -> None:
        self.fps, self.phase = fps, phase
        self.size = (W, H)
        self.start = None
        self.i = 0
        self.cancelled = threading.Event()

    def read(self):
        if self.start is None:
            self.start = time.monotonic()
        due = self.start + self.i / self.fps
        if self.cancelled.wait(max(0.0, due - time.monotonic())):
            return None
        t = self.phase + 2 * math.pi * self.i / (self.fps * 4)
        cx, cy = int(W / 2 + 70 * math.cos(t)), int(H / 2 + 60 * math.sin(t))
        img = np.zeros((H, W, 3), np.uint8)
        img[cy - 30 : cy + 30, cx - 30 : cx + 30] = 255
        self.i += 1
        return img, time.monotonic()

    def close(self) -> None:
        self.cancelled.set()

    def cancel(self) -> None:
        self.cancelled.set()

    def stats(self) -> dict:
        return {}


def flags(bundle: Path, events: Path, zone: str, cameras: int, port: int) -> str:
    """The site file of the run's flags (as ``edgert camera FLAGS --print-config`` writes it);
    its sources are the rendered scenes' names (the loader hands the scenes themselves)."""
    import argparse
    import shlex

    from edgert.apps.commands import camera as command
    from edgert.apps.config import site_from_args

    sources = " ".join(f"--source scene{i}" for i in range(cameras))
    text = (
        f"{bundle} {sources} --headless --conf 0.75 --events {events} "
        f"--metrics 127.0.0.1:{port} --zone 0:{zone} --line 1:door=160,0,160,240"
    )
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    return site_from_args(parser.parse_args(["camera", *shlex.split(text)])).yaml()


def loader_of(scenes: dict):
    """The camera command's loader (a site file), its sources the rendered scenes."""
    from edgert.apps.config import load_site_text

    def load(text: str):
        site = load_site_text(text, name="site.yaml")
        cfg = site.config
        for u in cfg.sources:  # a camera removed was stopped: added again, it is a new one
            if scenes[u].cancelled.is_set():
                scenes[u] = Scene(scenes[u].fps, scenes[u].phase)
        cfg.sources = [scenes[u] for u in cfg.sources]
        return cfg, site.version, list(site.names)

    return load


def enters(path: Path, zone: str, since: int) -> int:
    """The new zone's zone_enter events in the events file, from byte ``since`` on."""
    with open(path, "rb") as f:
        f.seek(since)
        return sum(
            1
            for line in f.read().splitlines()
            if b'"zone_enter"' in line and f'"zone": "{zone}"'.encode() in line
        )


def camera1(port: int) -> tuple[int, int]:
    """Camera 1's frames captured and dropped (its queue) so far, from /metrics."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()

    def value(name: str, labels: str) -> int:
        m = re.search(rf"^{name}{{{labels}}} ([0-9.e+]+)$", text, re.M)
        return int(float(m.group(1)))

    return (
        value("edgert_frames_captured_total", 'stream="1"'),
        value("edgert_frames_dropped_total", 'reason="queue",stream="1"'),
    )


def run(bundle: Path, folder: Path, reloads: int, fps: float, seconds: float | None) -> dict:
    from edgert.apps.camera.app import run_camera
    from edgert.apps.camera.features.reload import ReloadOptions
    from tests.ports import free_ports

    scenes = {f"scene{i}": Scene(fps, i) for i in range(3)}
    events, config = folder / "events.jsonl", folder / "site.yaml"
    port = free_ports(1)[0]
    config.write_text(flags(bundle, events, ZONES[0], 2, port))
    load = loader_of(scenes)
    cfg, version, names = load(config.read_text())
    cfg.more["reload"] = ReloadOptions(str(config), True, None, load, version, tuple(names))
    times: list = []
    window: list = []  # camera 1's (captured, dropped) before the reloads and after them

    def reload_all() -> None:
        time.sleep(3.0)  # the run settled
        window.append(camera1(port))
        for i in range(reloads):
            zone = ZONES[(i + 1) % 2]
            since = events.stat().st_size
            tmp = config.with_suffix(".tmp")
            tmp.write_text(flags(bundle, events, zone, 3 if i % 2 == 0 else 2, port))
            t0 = time.monotonic()
            os.replace(tmp, config)
            name = zone.split("=")[0]
            while not enters(events, name, since) and time.monotonic() - t0 < 10:
                time.sleep(0.005)
            times.append(time.monotonic() - t0)
            time.sleep(0.3)
        if not reloads:
            time.sleep(seconds)
        window.append(camera1(port))
        _stop(scenes)

    threading.Thread(target=reload_all, daemon=True).start()
    summary = run_camera(cfg)
    (c0, d0), (c1, d1) = window
    return {
        "reloads": len(times),
        "reload_s": times,
        "camera1_frames": c1 - c0,  # from the first reload to the end of the last
        "camera1_dropped": d1 - d0,
        "applied": (summary.get("config") or {}).get("applied", 0),
        "refused": (summary.get("config") or {}).get("refused", 0),
    }


def _stop(scenes: dict) -> None:
    """The run ends as at its sources' end (every scene stops delivering)."""
    for s in scenes.values():
        s.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reloads", type=int, default=50)
    ap.add_argument("--fps", type=float, default=15.0)
    ap.add_argument("--json", default=str(ROOT / "reports" / "reload.json"))
    a = ap.parse_args()
    from tests.tiny import blob_detector_bundle

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bundle = blob_detector_bundle(folder / "det")
        for name in ("r", "b"):
            (folder / name).mkdir()
        reloading = run(bundle, folder / "r", a.reloads, a.fps, None)
        took = sum(reloading["reload_s"]) + 0.3 * a.reloads
        baseline = run(bundle, folder / "b", 0, a.fps, took)
    t = sorted(reloading["reload_s"])
    rows = [
        (
            "reloads applied",
            f"{reloading['applied']} of {a.reloads} ({reloading['refused']} refused)",
        ),
        ("file change -> new zone counting, p50", f"{1e3 * statistics.median(t):.0f} ms"),
        ("  p90 / max", f"{1e3 * t[int(0.9 * (len(t) - 1))]:.0f} / {1e3 * t[-1]:.0f} ms"),
        ("  over 1 s", f"{sum(x > 1.0 for x in t)} of {len(t)}"),
        (
            "camera 1 (unchanged) frames dropped, with reloads",
            f"{reloading['camera1_dropped']} of {reloading['camera1_frames']}",
        ),
        (
            "camera 1 frames dropped, same run without reloads",
            f"{baseline['camera1_dropped']} of {baseline['camera1_frames']}",
        ),
    ]
    print(f"live reload, {a.reloads} reloads, 3 rendered cameras at {a.fps:g} fps (this machine)")
    for k, v in rows:
        print(f"  {k:<52} {v}")
    write_json(a.json, {"fps": a.fps, "reloading": reloading, "baseline": baseline, "table": rows})


if __name__ == "__main__":
    main()
