"""Video files: one stream writes ``out.mp4``; several write ``out_<i>.mp4`` each, or one mosaic
(``--mosaic``) with a tile per stream. ``file://PATH`` or a bare path ending .mp4, .avi or .mkv.
H.264 where the machine has an encoder for GStreamer (:mod:`.h264_file`: browsers play it),
else OpenCV's mp4v, said once when the output opens (browsers do not play it)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.errors import OutputError

from ..media.opencv_log import quiet_opencv
from .base import Sink, SinkContext, stream_of, written
from .h264_file import H264Writer, choose
from .mosaic import MosaicOutput, letterbox


class VideoFileOutput(Sink):
    """A video file. Every frame goes in at the size of the first: others are letterboxed into it
    (and counted). A write that fails (a full disk) raises OutputError, and the finished file is
    opened again and its frames counted: a file that cannot be played, or holds fewer frames than
    were written, is an error, not a success. ``encoder``: the GStreamer H.264 encoder to write
    with (:func:`.h264_file.choose`), or None: OpenCV's mp4v."""

    CHECK_SPACE_S = 1.0

    def __init__(self, path: str, fps: float = 30.0, encoder: str | None = None) -> None:
        self.path, self.fps, self.encoder = Path(path), fps, encoder
        self.writer = None
        self.size: tuple[int, int] | None = None
        self.frames = 0
        self.letterboxed = 0
        self.failed = False
        self._space_checked = 0.0
        blocker = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            raise OutputError(f"cannot write video {self.path}: {blocker} is a file, not a folder")
        try:  # fail now, in one sentence, rather than from the output thread mid-run
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_dir():
                raise OutputError(f"cannot write video {self.path}: it is a folder")
            with tempfile.TemporaryFile(dir=self.path.parent):
                pass
        except OSError as exc:
            raise OutputError(
                f"cannot write video {self.path}: "
                + atomic.describe_os_error(exc, self.path.parent).split(": ", 1)[-1]
            ) from exc

    def _fail(self, why: str) -> OutputError:
        self.failed = True
        return OutputError(f"video {self.path}: {why}")

    def write(self, frame, overlay_image, record: dict) -> None:
        if self.writer is None:
            self._open(*overlay_image.shape[1::-1])
        if overlay_image.shape[1::-1] != self.size:  # a stream whose size changed mid-run
            overlay_image = letterbox(overlay_image, self.size)
            self.letterboxed += 1
        with quiet_opencv():
            ok = self.writer.write(overlay_image)
        if ok is False:  # OpenCV 5 says; 4.x returns None and the file is checked on close
            why = getattr(self.writer, "error", None) or self._why()
            raise self._fail(f"writing frame {self.frames + 1} failed ({why})")
        self.frames += 1
        now = time.monotonic()
        if now - self._space_checked >= self.CHECK_SPACE_S:
            self._space_checked = now
            if self._free_bytes() == 0:
                raise self._fail("no space left on the device")

    def _open(self, w: int, h: int) -> None:
        """The writer, for frames of ``w`` x ``h``: H.264 through GStreamer, or OpenCV's mp4v."""
        import cv2

        self.size = (w, h)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.encoder is not None:
            try:
                self.writer = H264Writer(self.path, (w, h), self.fps, self.encoder)
            except Exception as exc:  # noqa: BLE001 - GLib.Error: a pipeline GStreamer refused
                raise OutputError(
                    f"cannot write video {self.path} with {self.encoder}: {exc}"
                ) from None
            return
        self.writer = cv2.VideoWriter(
            str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h)
        )
        if not self.writer.isOpened():
            raise OutputError(f"cannot write video {self.path} (no mp4v encoder in this OpenCV?)")

    @property
    def codec(self) -> str:
        return "h264" if self.encoder is not None else "mp4v"

    def _free_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.path.parent)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _why(self) -> str:
        return "no space left on the device" if self._free_bytes() == 0 else "the disk may be full"

    def close(self) -> None:
        if self.writer is None:
            return
        import cv2

        writer, self.writer = self.writer, None
        writer.release()
        if self.failed:
            return
        if getattr(writer, "error", None):  # GStreamer could not end the file
            raise self._fail(f"writing the file failed after {self.frames} frames ({writer.error})")
        with quiet_opencv():
            cap = cv2.VideoCapture(str(self.path))
            opened = cap.isOpened()
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if opened else 0
            cap.release()
        if not opened:
            raise self._fail(
                f"the file cannot be played after {self.frames} frames ({self._why()})"
            )
        if 0 < count < self.frames:
            raise self._fail(
                f"the file holds {count} of the {self.frames} frames written ({self._why()})"
            )

    def report(self) -> dict:
        return {
            "output": str(self.path),
            "frames": self.frames,
            "letterboxed": self.letterboxed,
            "codec": self.codec,
        }

    def wrote(self) -> list:
        if not self.frames:
            return []
        return [written("video", self.path, frames=self.frames, codec=self.codec)]


def per_stream_path(path: Path, i: int) -> Path:
    """out.mp4 -> out_<i>.mp4"""
    return path.with_name(f"{path.stem}_{i}{path.suffix}")


class StreamFilesOutput(Sink):
    """One video file per stream: ``out_<i>.mp4``."""

    def __init__(self, path: str, fps: float, streams: int, encoder: str | None = None) -> None:
        self.files = [
            VideoFileOutput(str(per_stream_path(Path(path), i)), fps, encoder)
            for i in range(streams)
        ]

    def write(self, frame, overlay_image, record: dict) -> None:
        self.files[stream_of(frame)].write(frame, overlay_image, record)

    def close(self) -> None:
        errors = []
        for f in self.files:
            try:
                f.close()
            except OutputError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def report(self) -> list:
        return [f.report() for f in self.files]

    def wrote(self) -> list:
        return [entry for f in self.files for entry in f.wrote()]


def _path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def open_uri(uri: str, ctx: SinkContext) -> Sink:
    path, n = _path(uri), len(ctx.streams)
    encoder, why = choose(path)
    if why:
        ctx.say(f"note: {why}")
    if n > 1 and ctx.options.mosaic:
        return MosaicOutput(VideoFileOutput(path, ctx.fps, encoder), n)
    if n > 1:
        return StreamFilesOutput(path, ctx.fps, n, encoder)
    return VideoFileOutput(path, ctx.fps, encoder)


def paths(uri: str, streams: int, mosaic: bool) -> list[tuple[str, Path]]:
    """(what, path) of every file written: a file per stream when there are several streams and
    no mosaic."""
    path = Path(_path(uri))
    if streams > 1 and not mosaic:
        return [(f"--output {uri} (stream {i})", per_stream_path(path, i)) for i in range(streams)]
    return [(f"--output {uri}", path)]
