"""The web viewer's page in headless Chromium (Debian's chromium): it shows the stream (every
stream, in a grid, for several sources) and its statistics change while the pipeline runs.
A screenshot is kept for a person to look at."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.subprocess, pytest.mark.browser]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
@pytest.mark.parametrize("streams", [1, 2])
def test_page_shows_stream_and_changing_stats(tmp_path, streams):
    import sys

    from edgert.export import export_model
    from edgert.runtime.sample_data import photo_path

    bundle = export_model("zoo:digits_cnn", tmp_path / "d.edgert").bundle
    port = free_port()
    sources = ["--source", "synthetic://"]
    if streams == 2:  # a second, different stream: a photo, looped
        # and event-gated inference: each tile says the share of its frames inferred, and why
        sources += ["--source", str(photo_path("coffee")), "--loop", "--gate", "motion"]
    app = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(bundle),
            *sources,
            "--headless",
            "--output",
            f"http://127.0.0.1:{port}",
            "--duration",
            "30",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/"

        def frames_shown() -> list[int]:
            """The overall frame count, then each stream's (its tile's caption)."""
            dom = subprocess.run(
                [
                    CHROMIUM,
                    *FLAGS,
                    f"--user-data-dir={tmp_path / 'p1'}",
                    "--virtual-time-budget=2500",
                    "--dump-dom",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
            m = re.search(r"frames\s+(\d+)", dom)
            assert m, dom[-500:]
            tiles = [
                re.search(rf'id="cap{i}">\[{i}\][^<]*?\nframes (\d+)', dom) for i in range(streams)
            ]
            assert all(tiles), dom[-1500:]
            gates = re.findall(r"\ngate motion: ([\d.]+) % inferred \((start|motion|keyframe)", dom)
            assert len(gates) == (2 if streams == 2 else 0), dom[-1500:]
            assert (
                f'src="/stream/{streams - 1}.mjpg"' in dom and f"/stream/{streams}.mjpg" not in dom
            )
            return [int(m.group(1))] + [int(t.group(1)) for t in tiles]

        first = frames_shown()
        time.sleep(1.5)
        second = frames_shown()
        assert all(b > a for a, b in zip(first, second, strict=True))  # every number moves
        shot = tmp_path / "page.png"
        subprocess.run(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={tmp_path / 'p2'}",
                "--window-size=1000,620",
                "--virtual-time-budget=3000",
                f"--screenshot={shot}",
                url,
            ],
            capture_output=True,
            timeout=60,
        )
        import cv2

        img = cv2.imread(str(shot))
        assert img is not None and img.shape[:2] == (620, 1000)
        # where the <img> of each MJPEG stream sits: one tile 700 px wide, or two of 347
        tiles = (
            [img[60:540, 16:656]] if streams == 1 else [img[90:300, 30:340], img[90:300, 390:700]]
        )
        for video in tiles:
            assert video.std() > 20  # a real picture, not the empty page background
        (ROOT / "reports").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "reports" / f"camera_page{'' if streams == 1 else '_grid'}.png")
    finally:
        app.terminate()
        app.wait(10)


def _get(url: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
def test_page_lists_events_with_snapshots_and_clips_and_its_charts_move(tmp_path):
    """A looped scene whose objects cross a line: the page lists the events, newest first, with
    each track's snapshot and a link to its clip (served from /media/, and only what an event
    named), and per stream small charts of the last minutes' numbers that move as the run goes,
    power and temperature among them (the power and thermal plants of the closed-loop tests turn
    the run's CPU time into an Orin's INA3221 VDD_IN and its cpu-thermal zone)."""
    import json
    import sys

    from tests.apps.test_clip_folders import _can_clip
    from tests.apps.test_gate import quiet_scene
    from tests.power_plant import write_tree
    from tests.procs import SCENE, edgert
    from tests.thermal_plant import write_zone
    from tests.tiny import blob_detector_bundle

    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    port = free_port()
    root = tmp_path / "board"
    write_tree(root, 4.5)
    write_zone(root, 40.0)
    clips = ["--clips", str(tmp_path / "clips"), "--pre-roll", "1", "--post-roll", "1"]
    app = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
            *("--snapshots", tmp_path / "snaps", *(clips if _can_clip() else [])),
            *("--output", f"http://127.0.0.1:{port}", "--duration", "60", "--sysfs-root", root),
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    plants = [
        subprocess.Popen(
            [sys.executable, "-m", f"tests.{plant}", str(root), str(app.pid)], cwd=ROOT
        )
        for plant in ("power_plant", "thermal_plant")
    ]
    try:
        deadline = time.monotonic() + 45
        events: list = []
        while time.monotonic() < deadline:
            try:
                events = json.loads(_get(f"http://127.0.0.1:{port}/events.json")[1])
            except OSError:
                events = []
            if any("snapshot" in e for e in events) and (
                not _can_clip() or any("clip" in e for e in events)
            ):
                break
            time.sleep(0.5)
        snap = next(e["snapshot"] for e in events if "snapshot" in e)
        code, body = _get(f"http://127.0.0.1:{port}{snap}")
        assert code == 200 and body[:2] == b"\xff\xd8", code  # the JPEG the event named
        for other in ("/media/scene.mp4", "/media/..%2F..%2Fetc%2Fpasswd", "/media/"):
            assert _get(f"http://127.0.0.1:{port}{other}")[0] == 404  # nothing else of the disk
        url = f"http://127.0.0.1:{port}/"

        def dump() -> str:
            return subprocess.run(
                [
                    CHROMIUM,
                    *FLAGS,
                    f"--user-data-dir={tmp_path / 'p1'}",
                    "--virtual-time-budget=2500",
                    "--dump-dom",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout

        lines = lambda dom: re.findall(r'<polyline points="([^"]+)"', dom)  # noqa: E731
        deadline = time.monotonic() + 30
        first = dump()
        while len(lines(first)) < 5 and time.monotonic() < deadline:  # two readings of each
            time.sleep(1.0)  # (a chart needs two points; power and heat read after a moment)
            first = dump()
        assert re.search(r'<img src="/media/[^"]+_track\d+_[0-9a-f]{8}(-\d+)?\.jpg"', first), first[
            -2000:
        ]
        assert re.search(r"line_cross door (in|out) blob #\d+", first), first[-2000:]
        if _can_clip():
            assert re.search(r'<a href="/media/[^"]+\.mp4">clip</a>', first), first[-2000:]
        names = re.findall(r'class="chart" data-name="([^"]+)"', first)
        assert names == ["fps", "e2e p50 ms", "drops/s", "W", "\u00b0C"], names
        for name in ("W", "\u00b0C"):  # the plants' readings, charted
            assert re.search(rf'data-name="{name}"><div>{name} \d', first), first[-2000:]
        assert len(lines(first)) == 5, first[-2000:]
        time.sleep(2.0)
        second = dump()
        assert lines(second) and lines(second)[0] != lines(first)[0]  # the fps chart moved
        shot = tmp_path / "page.png"
        subprocess.run(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={tmp_path / 'p2'}",
                "--window-size=1200,1000",
                "--virtual-time-budget=3000",
                f"--screenshot={shot}",
                url,
            ],
            capture_output=True,
            timeout=60,
        )
        assert shot.exists()
        (ROOT / "reports").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "reports" / "camera_page_events.png")
    finally:
        app.terminate()
        app.wait(10)
        for plant in plants:  # they end with the process they watch
            plant.wait(10)
