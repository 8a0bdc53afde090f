"""The rtsp:// output's cost (issue 36): latency from a camera's push of a frame to a client decoding
edgert's re-served frame, against the input path alone, and the CPU a re-streamed stream costs.

A live camera (tests/rtsp_server.py, each frame's index burned into its pixels, ``--sends``: the
CLOCK_MONOTONIC time of every push) at 25 fps:

    input path    the camera -> a client (edgert's own rtsp:// source: rtspsrc + avdec_h264)
    re-stream     the camera -> edgert camera (a classifier, the clean frames re-served) ->
                  a client of the same kind on edgert's rtsp:// output

Latency = the client's capture time of a decoded frame - the camera's push time of its index
(the same clock in every process of this machine). CPU: edgert camera's CPU time (from
/proc/PID/stat) over the same seconds with the re-stream watched by one client, and without the
rtsp:// output. Prints a table and writes JSON.

    python benchmarks/restream.py [--json reports/restream.json] [--seconds 15] [--size 1280x720]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.json_report import write_json  # noqa: E402
from edgert.apps.camera.sources import SourceOptions, open_source  # noqa: E402
from tests.apps.test_restream import Camera  # noqa: E402
from tests.ports import free_ports  # noqa: E402
from tests.power_plant import cpu_seconds  # noqa: E402
from tests.rtsp_server import frame_index  # noqa: E402
from tests.tiny import classifier_bundle  # noqa: E402


def camera_server(port: int, sends: Path, width: int, height: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.rtsp_server",
            "--port",
            str(port),
            "--fps",
            "25",
            "--width",
            str(width),
            "--height",
            str(height),
            "--sends",
            str(sends),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().startswith("ready")
    return proc


def receive(url: str, seconds: float) -> list:
    """(index, capture time) of every frame a client decodes for ``seconds``."""
    source = open_source(url, SourceOptions(decoder="gstreamer", rtsp_transport="tcp"))
    got = []
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            frame, t = source.read()
            got.append((frame_index(frame), t))
    finally:
        source.close()
    return got


def latencies(got: list, sends: Path) -> np.ndarray:
    """ms from each decoded frame's push to its capture: the camera serves every client its own
    media from frame 0, so an index's push is its latest one before the frame was received."""
    import bisect

    sent: dict = {}
    for line in sends.read_text().splitlines():
        i, t = line.split()
        sent.setdefault(int(i), []).append(float(t))
    ms = []
    for i, t in got[10:]:  # after the join
        times = sent.get(i, [])
        k = bisect.bisect_right(times, t)
        if k:
            ms.append((t - times[k - 1]) * 1e3)
    return np.array(ms)


def cpu_over(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def encoder_cores(width: int, height: int, frames: int = 250, fps: int = 25) -> float:
    """Cores the rtsp:// output's software chain (BGR -> I420 -> x264, as sinks/rtsp.py builds
    it) takes for one stream at ``fps``: its CPU time for ``frames`` frames over their duration."""
    from edgert.apps.camera import media
    from tests.rtsp_server import pattern_frame

    Gst = media.gst()
    name, _ = media.choose_encoder(media.elements())
    caps = f"video/x-raw,format=BGR,width={width},height={height},framerate={fps}/1"
    pipe = Gst.parse_launch(
        f"appsrc name=src format=time caps={caps} ! {media.encode_chain(name, 4000, fps)} "
        "! fakesink sync=false"
    )
    src = pipe.get_by_name("src")
    pipe.set_state(Gst.State.PLAYING)
    images = [pattern_frame(i, width, height).tobytes() for i in range(fps)]
    c0 = time.process_time()
    for i in range(frames):
        buf = Gst.Buffer.new_wrapped(images[i % fps])
        buf.pts = i * Gst.SECOND // fps
        src.emit("push-buffer", buf)
    src.emit("end-of-stream")
    pipe.get_bus().timed_pop_filtered(60 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    used = time.process_time() - c0
    pipe.set_state(Gst.State.NULL)
    return used / (frames / fps)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", default="reports/restream.json")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--size", default="1280x720")
    a = ap.parse_args()
    width, height = (int(v) for v in a.size.split("x"))
    work = Path(tempfile.mkdtemp(prefix="edgert-restream-"))
    bundle = classifier_bundle(work / "m")
    src_port, out_port = free_ports(2)
    sends = work / "sends.txt"
    server = camera_server(src_port, sends, width, height)
    rows = []
    try:
        source = f"rtsp://127.0.0.1:{src_port}/cam"
        direct = latencies(receive(source, a.seconds), sends)
        cam = Camera(bundle, source, None, seconds=a.seconds + 6)
        plain_cpu = cpu_over(cam.proc.pid, a.seconds * 0.6)
        cam.proc.wait()
        out = f"rtsp://127.0.0.1:{out_port}/live?clean=1"
        cam = Camera(bundle, source, out, seconds=a.seconds + 8)
        import threading

        box = {}
        watcher = threading.Thread(
            target=lambda: box.update(got=receive(f"rtsp://127.0.0.1:{out_port}/live", a.seconds))
        )
        watcher.start()
        time.sleep(2.0)
        restream_cpu = cpu_over(cam.proc.pid, a.seconds * 0.6)
        watcher.join()
        cam.stop()
        again = latencies(box["got"], sends)
    finally:
        server.terminate()
        server.wait(10)
    for name, ms in (
        ("input path (camera -> client)", direct),
        ("re-stream (camera -> edgert -> client)", again),
    ):
        rows.append(
            {
                "path": name,
                "frames": int(ms.size),
                "p50_ms": round(float(np.percentile(ms, 50)), 1),
                "p99_ms": round(float(np.percentile(ms, 99)), 1),
            }
        )
    added = rows[1]["p50_ms"] - rows[0]["p50_ms"]
    print(f"\n{width}x{height} at 25 fps, {a.seconds:g} s per path")
    print(f"{'path':<42}{'frames':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for r in rows:
        print(f"{r['path']:<42}{r['frames']:>8}{r['p50_ms']:>9.1f}{r['p99_ms']:>9.1f}")
    print(f"added by the re-stream (p50): {added:.1f} ms (goal: at most 100 ms)")
    enc = encoder_cores(width, height)
    print(
        f"the software encoder chain alone: {enc:.2f} cores per {width}x{height} stream at 25 fps"
    )
    print(
        f"edgert camera CPU: {plain_cpu:.2f} cores without the rtsp:// output, "
        f"{restream_cpu:.2f} with it watched ({restream_cpu - plain_cpu:+.2f} cores per "
        f"re-streamed {width}x{height} stream, x264)"
    )
    write_json(
        a.json,
        {
            "size": a.size,
            "rows": rows,
            "added_p50_ms": round(added, 1),
            "cpu_cores": {
                "without": round(plain_cpu, 3),
                "with_restream": round(restream_cpu, 3),
                "encoder_chain_alone": round(enc, 3),
            },
        },
    )


if __name__ == "__main__":
    main()
