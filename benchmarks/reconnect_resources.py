"""What a reconnect loop holds: file descriptors and resident memory of this process while
``StreamSource`` keeps trying cameras that are dead, and across real outages of a live one.

Two phases per decoder (GStreamer and OpenCV's FFmpeg), side by side in one run:

- dead: ``--cameras`` streams to a closed loopback port, ``--reconnect forever``, each read
  attempt failing at once; descriptors and RSS sampled from /proc every few seconds;
- outages: a real RTSP server (tests/rtsp_server.py, gst-rtsp-server) killed and started again
  ``--outages`` times while one stream reads; descriptors and RSS after each reconnect.

    .venv/bin/python benchmarks/reconnect_resources.py --seconds 60 --json reports/reconnect.json

Run it against another checkout's code with ``PYTHONPATH`` pointing at a folder where ``edgert``
links to that checkout (how the round-four note measured the code before its fix).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from json_report import write_json  # noqa: E402

from tests.ports import free_ports  # noqa: E402


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def dead(decoder: str, cameras: int, seconds: float) -> dict:
    """``cameras`` capture threads reading dead cameras for ``seconds``: the samples."""
    from edgert.apps.camera.sources import SourceOptions, StreamSource

    port = free_ports(1)[0]
    opts = SourceOptions(
        decoder=decoder,
        reconnect_tries=None,
        reconnect_backoff=0.2,
        max_backoff=0.5,
        io_timeout=1.0,
        rtsp_transport="tcp",
    )
    sources = [
        StreamSource(f"rtsp://127.0.0.1:{port}/cam{i}", opts, decoder) for i in range(cameras)
    ]
    threads = []
    for s in sources:
        t = threading.Thread(target=lambda s=s: _read_until_stopped(s), daemon=True)
        t.start()
        threads.append(t)
    samples = [(0.0, fds(), rss_kb())]
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(min(5.0, seconds / 6))
        samples.append((round(time.monotonic() - t0, 1), fds(), rss_kb()))
    for s in sources:
        s.cancel()
    for t in threads:
        t.join(5)
    for s in sources:
        s.close()
    return {
        "samples": samples,
        "fds_start": samples[0][1],
        "fds_end": samples[-1][1],
        "rss_kb_start": samples[0][2],
        "rss_kb_end": samples[-1][2],
    }


def _read_until_stopped(source) -> None:
    from edgert.runtime.errors import SourceError

    with contextlib.suppress(SourceError):  # cancelled at the end
        source.read()


def outages(decoder: str, n: int) -> dict:
    """One stream through ``n`` real outages of its server: descriptors and RSS after each."""
    from edgert.apps.camera.sources import SourceOptions, StreamSource
    from tests.apps.test_rtsp_real import Server

    opts = SourceOptions(
        decoder=decoder,
        reconnect_tries=None,
        reconnect_backoff=0.2,
        max_backoff=0.5,
        io_timeout=2.0,
        stall_timeout=1.0,
        rtsp_transport="tcp",
    )
    after = []
    with Server(free_ports(1)[0]) as server:
        source = StreamSource(server.url, opts, decoder)
        try:
            for _ in range(10):
                source.read()
            after.append((0, fds(), rss_kb()))
            for k in range(1, n + 1):
                server.stop()
                time.sleep(0.5)
                server.start()
                while source.reconnects < k:
                    source.read()
                for _ in range(10):
                    source.read()
                after.append((k, fds(), rss_kb()))
        finally:
            source.close()
    return {
        "after_each": after,
        "fds_per_outage": (after[-1][1] - after[0][1]) / n,
        "rss_kb_per_outage": (after[-1][2] - after[0][2]) / n,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="of the dead-camera phase")
    p.add_argument("--cameras", type=int, default=8)
    p.add_argument("--outages", type=int, default=5)
    p.add_argument("--json", default="reports/reconnect_resources.json")
    args = p.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)  # each failed attempt is a warning: not the table
    import edgert.apps
    from edgert.apps.camera import media

    decoders = ["gstreamer", "ffmpeg"] if media.available()[0] else ["ffmpeg"]
    result = {
        "code": str(Path(edgert.apps.__file__).resolve().parent.parent),
        "cameras": args.cameras,
        "seconds": args.seconds,
        "decoders": {},
    }
    print(
        f"{'decoder':<10} {'phase':<8} {'fds start':>9} {'fds end':>8} {'RSS start MB':>12} "
        f"{'RSS end MB':>10}"
    )
    for decoder in decoders:
        d = dead(decoder, args.cameras, args.seconds)
        o = outages(decoder, args.outages)
        result["decoders"][decoder] = {"dead": d, "outages": o}
        print(
            f"{decoder:<10} {'dead':<8} {d['fds_start']:>9} {d['fds_end']:>8} "
            f"{d['rss_kb_start'] / 1024:>12.1f} {d['rss_kb_end'] / 1024:>10.1f}"
        )
        first, last = o["after_each"][0], o["after_each"][-1]
        print(
            f"{decoder:<10} {'outages':<8} {first[1]:>9} {last[1]:>8} {first[2] / 1024:>12.1f} "
            f"{last[2] / 1024:>10.1f}   ({o['fds_per_outage']:+.1f} fds, "
            f"{o['rss_kb_per_outage'] / 1024:+.2f} MB per outage)"
        )
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
