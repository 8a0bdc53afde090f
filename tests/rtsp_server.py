"""A real RTSP server for the tests and the latency benchmark: GStreamer's own gst-rtsp-server
(Debian's gir1.2-gst-rtsp-server-1.0 through PyGObject), serving H.264 or H.265 encoded by x264 or
x265 from frames pushed into an ``appsrc`` at the frame rate, as a camera would.

    python -m tests.rtsp_server --port 8554 [--codec h264|h265] [--video clip.mp4]
                                [--stall-after N] [--slices] [--gop N] [--sends FILE]
                                [--switch-at N] [--encoded clip.mp4]

Each client gets its own media, from frame 0. Every frame carries its index burned into its top
band (:func:`frame_index` reads it back from decoded pixels), so a receiver can tell which frame
it got and, with ``--sends`` (``INDEX MONOTONIC_SECONDS`` per pushed frame; CLOCK_MONOTONIC is the
same clock in every process of this machine), how long after it was sent. ``--stall-after N``
pushes N frames and then nothing, leaving the connection open: a camera that hangs.
``--switch-at N`` sends frames of twice the width and height from frame N on, in the same stream
(new caps, so new parameter sets at a key frame): a camera set to another size while it streams.
``--encoded clip.mp4`` serves an H.264 MP4 as it is (demuxed and payloaded, nothing decoded or
encoded: each client costs the server almost nothing, so many streams can be served from one
core), at the pace of its timestamps, every client from its start (no index burned in). Prints
``ready rtsp://127.0.0.1:PORT/cam`` once it listens.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time

import numpy as np

BITS = 16  # frame indices up to 65535


def pattern_frame(i: int, width: int = 320, height: int = 240) -> np.ndarray:
    """Frame ``i`` of the built-in scene: a gradient with two moving squares, and the index."""
    y, x = np.mgrid[0:height, 0:width]
    frame = np.empty((height, width, 3), np.uint8)
    frame[..., 0] = (x * 255 // max(1, width - 1)).astype(np.uint8)
    frame[..., 1] = (y * 255 // max(1, height - 1)).astype(np.uint8)
    frame[..., 2] = 96
    s = height // 5
    for k, speed in enumerate((3, 5)):
        cx = (i * speed + k * width // 2) % max(1, width - s)
        cy = height // 3 + k * height // 4
        frame[cy : cy + s, cx : cx + s] = (40 + 160 * k, 220 - 150 * k, 250)
    return burn_index(frame, i)


def burn_index(frame: np.ndarray, i: int) -> np.ndarray:
    """``frame`` with ``i`` in its top band: BITS blocks, white for 1, black for 0."""
    h, w = frame.shape[:2]
    bw, bh = w // BITS, max(8, h // 12)
    for b in range(BITS):
        frame[:bh, b * bw : (b + 1) * bw] = 255 if (i >> (BITS - 1 - b)) & 1 else 0
    return frame


def frame_index(image: np.ndarray) -> int:
    """The index :func:`burn_index` wrote, read from the blocks' centres (codec noise is far
    below the 128 threshold)."""
    h, w = image.shape[:2]
    bw, bh = w // BITS, max(8, h // 12)
    value = 0
    for b in range(BITS):
        block = image[bh // 4 : bh * 3 // 4, b * bw + bw // 4 : b * bw + bw * 3 // 4]
        value = (value << 1) | int(block.mean() > 128)
    return value


def _encoder(codec: str, fps: int, slices: bool = False, gop: int | None = None) -> str:
    gop = gop or max(1, fps)  # a key frame a second: a client that joins or rejoins starts at once
    if codec == "h265":
        return (
            f"x265enc tune=zerolatency speed-preset=ultrafast key-int-max={gop} ! "
            "rtph265pay name=pay0 pt=96 config-interval=-1"
        )
    # zerolatency turns on sliced threads (several slices a frame, as many IP cameras send);
    # off by default, since OpenCV's FFmpeg decodes such RTP streams wrongly (see the tests);
    # one thread then, since frame threads hold frames back (each is sent when it is pushed)
    return (
        f"x264enc tune=zerolatency speed-preset=ultrafast key-int-max={gop} bframes=0 "
        f"sliced-threads={str(slices).lower()}{'' if slices else ' threads=1'} ! "
        "video/x-h264,profile=baseline ! rtph264pay name=pay0 pt=96 config-interval=-1"
    )


def _caps(args, width: int, height: int) -> str:
    return f"video/x-raw,format=BGR,width={width},height={height},framerate={args.fps}/1"


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--codec", choices=["h264", "h265"], default="h264")
    p.add_argument(
        "--video", help="loop this video's frames (index burned in) instead of the scene"
    )
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--fps", type=int, default=25)
    p.add_argument("--stall-after", type=int)
    p.add_argument("--slices", action="store_true", help="H.264 with several slices a frame")
    p.add_argument("--gop", type=int, help="frames from one key frame to the next (default: fps)")
    p.add_argument("--sends")
    p.add_argument("--switch-at", type=int, help="twice the size from this frame on")
    p.add_argument("--encoded", help="serve this H.264 MP4 as it is, in real time")
    args = p.parse_args(argv)

    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstRtspServer", "1.0")
    from gi.repository import GLib, Gst, GstRtspServer

    Gst.init(None)
    frames = None
    if args.video:
        import cv2

        cap = cv2.VideoCapture(args.video)
        frames = []
        while True:
            ok, f = cap.read()
            if not ok:
                break
            frames.append(f)
        cap.release()
        args.height, args.width = frames[0].shape[:2]
    sends = open(args.sends, "a", buffering=1) if args.sends else None  # noqa: SIM115
    send_lock = threading.Lock()

    def feed(appsrc, stopped: threading.Event) -> None:
        # frames from when the client plays: stamped with the pipeline's clock as they are pushed
        while appsrc.get_state(0)[1] != Gst.State.PLAYING:
            if stopped.wait(0.01):
                return
        start = time.monotonic()
        i = 0
        while not stopped.is_set():
            if args.stall_after is not None and i >= args.stall_after:
                stopped.wait(0.1)  # hang: no more frames, the session stays up
                continue
            due = start + i / args.fps
            wait = due - time.monotonic()
            if wait > 0 and stopped.wait(wait):
                break
            if frames is not None:
                image = burn_index(frames[i % len(frames)].copy(), i)
            else:
                image = pattern_frame(i, args.width, args.height)
            if args.switch_at is not None and i >= args.switch_at:
                import cv2

                h, w = image.shape[:2]
                image = burn_index(cv2.resize(image, (2 * w, 2 * h)), i)
                if i == args.switch_at:  # the stream's caps change: the encoder follows
                    appsrc.set_property("caps", Gst.Caps.from_string(_caps(args, 2 * w, 2 * h)))
            data = image.tobytes()  # copied into GStreamer's own memory: the encoder keeps
            buf = Gst.Buffer.new_allocate(None, len(data), None)  # references to past frames
            buf.fill(0, data)
            if sends is not None:
                with send_lock:
                    sends.write(f"{i} {time.monotonic():.6f}\n")
            if appsrc.emit("push-buffer", buf) != Gst.FlowReturn.OK:
                break
            i += 1

    def configure(_factory, media) -> None:
        appsrc = media.get_element().get_by_name("src")
        stopped = threading.Event()
        media.connect("unprepared", lambda _m: stopped.set())
        threading.Thread(target=feed, args=(appsrc, stopped), daemon=True).start()

    caps = _caps(args, args.width, args.height)
    factory = GstRtspServer.RTSPMediaFactory()
    if args.encoded:  # the file's own packets, paced by the server's clock
        location = args.encoded.replace("\\", "\\\\").replace('"', '\\"')
        factory.set_launch(
            f'( filesrc location="{location}" ! qtdemux ! h264parse ! '
            "rtph264pay name=pay0 pt=96 config-interval=-1 )"
        )
    else:
        factory.set_launch(
            f"( appsrc name=src is-live=true do-timestamp=true format=time caps={caps} ! "
            f"videoconvert ! video/x-raw,format=I420 ! "
            f"{_encoder(args.codec, args.fps, args.slices, args.gop)} )"
        )
        factory.connect("media-configure", configure)
    factory.set_shared(False)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    server.get_mount_points().add_factory("/cam", factory)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{args.port}", file=sys.stderr)
        return 2
    loop = GLib.MainLoop()
    signal.signal(signal.SIGTERM, lambda *_: loop.quit())
    print(f"ready rtsp://127.0.0.1:{args.port}/cam", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
