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
