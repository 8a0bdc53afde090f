"""A video file in H.264, which browsers play (OpenCV's ``mp4v`` is MPEG-4 Part 2: they do not),
through GStreamer with the rtsp:// output's and clips' encoder choice (NVENC on a Jetson that
has it, else x264, else OpenH264: :func:`~edgert.apps.camera.media.choose_encoder`). ``.mp4`` is
written by ``mp4mux`` as fragmented MP4 (a fragment a second, as clips are): a run killed
mid-file leaves a file that plays up to its last fragment. ``.mkv`` by ``matroskamux``. Where
there is no GStreamer, no encoder, or the name is ``.avi``, :func:`choose` says why and the
video file is OpenCV's ``mp4v``."""

from __future__ import annotations

from pathlib import Path

MUXERS = {".mp4": "mp4mux fragment-duration=1000", ".mkv": "matroskamux"}
WHY_NOT = "it will not play in a web browser"


def choose(path, have: set | None = None) -> tuple[str | None, str | None]:
    """(the H.264 encoder element for ``path``, None), or (None, why it is written as mp4v
    instead, a sentence); ``have``: the GStreamer elements there are (None: this machine's; a
    test gives another's)."""
    from edgert.apps.camera.media import INSTALL, INSTALL_ENCODER, choose_encoder, elements

    suffix = Path(path).suffix.lower()
    if suffix not in MUXERS:
        return None, (
            f"{path} is written as MPEG-4 Part 2 (mp4v): {WHY_NOT} (name it .mp4 or .mkv for H.264)"
        )
    if have is None:
        try:
            _gst()
        except ImportError:
            return None, f"{path} is written as MPEG-4 Part 2 (mp4v): {WHY_NOT} ({INSTALL})"
        have = elements()
    encoder, _ = choose_encoder(have)
    if encoder is None:
        return None, (
            f"{path} is written as MPEG-4 Part 2 (mp4v): {WHY_NOT} (no H.264 encoder: "
            f"{INSTALL_ENCODER})"
        )
    return encoder, None


def _gst():
    from edgert.apps.camera.media import gst

    Gst = gst()
    if Gst.ElementFactory.find("mp4mux") is None or Gst.ElementFactory.find("h264parse") is None:
        raise ImportError("GStreamer's mp4mux and h264parse are not installed")
    return Gst


def kbps_for(width: int, height: int, fps: float) -> int:
    """A bit rate that keeps an annotated scene sharp: about 0.14 bits a pixel (720p at 30 fps:
    about 4 Mbit/s, the rtsp:// output's default), within 500 to 20000 kbit/s."""
    return int(min(20000, max(500, width * height * fps / 7000)))


class H264Writer:
    """``write(image)`` BGR frames of one size at ``fps`` into ``path``; ``release()`` ends the
    file. A write the pipeline refuses (a full disk) returns False; ``error`` says why."""

    def __init__(self, path, size: tuple[int, int], fps: float, encoder: str) -> None:
        from edgert.apps.camera.media import encode_chain

        self.Gst = Gst = _gst()
        self.fps = fps
        self.frames = 0
        self.error: str | None = None
        w, h = size
        rate = f"{round(fps * 1000)}/1000"
        gop = max(1, round(fps))  # a key frame a second: a player seeks within one
        caps = f"video/x-raw,format=BGR,width={w},height={h},framerate={rate}"
        self.pipe = Gst.parse_launch(
            f"appsrc name=src format=time block=true max-bytes={3 * w * h * 4} caps={caps} ! "
            f"{encode_chain(encoder, kbps_for(w, h, fps), gop)} ! h264parse ! "
            f"{MUXERS[Path(path).suffix.lower()]} ! filesink name=file"
        )
        self.pipe.get_by_name("file").set_property("location", str(path))
        self.src = self.pipe.get_by_name("src")
        self.pipe.set_state(Gst.State.PLAYING)

    def write(self, image) -> bool:
        Gst = self.Gst
        buf = Gst.Buffer.new_wrapped(image.tobytes())
        buf.pts = int(self.frames * Gst.SECOND / self.fps)
        buf.duration = int(Gst.SECOND / self.fps)
        flow = self.src.emit("push-buffer", buf)
        message = self.pipe.get_bus().pop_filtered(Gst.MessageType.ERROR)
        if flow != Gst.FlowReturn.OK or message is not None:
            self.error = gst_reason(message)
            return False
        self.frames += 1
        return True

    def release(self) -> None:
        """The file ended (its last fragment written); ``error`` set when it could not be."""
        Gst = self.Gst
        if self.pipe is None:
            return
        self.src.emit("end-of-stream")
        msg = self.pipe.get_bus().timed_pop_filtered(
            30 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR
        )
        self.pipe.set_state(Gst.State.NULL)
        self.pipe = None
        if msg is None:
            self.error = self.error or "it did not finish within 30 s"
        elif msg.type != Gst.MessageType.EOS:
            self.error = self.error or gst_reason(msg)


def gst_reason(message) -> str:
    """The sentence of a GStreamer error message (filesink: "Error while writing to file ...",
    with the OS's reason in its debug text: "No space left on device"); clips say it too."""
    if message is None:
        return "the write was refused"
    err, debug = message.parse_error()
    text = f"{err.message} {debug or ''}"
    for reason in ("No space left on device", "File too large", "Permission denied"):
        if reason in text:
            return reason.lower()
    return err.message
