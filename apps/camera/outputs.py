"""Outputs, several at once: a display window, the MJPEG web viewer (``web.py``), a video file, a
JSONL log; each knows the camera's streams (``frame.stream``).

Video files: one stream writes ``out.mp4``; several write ``out_<i>.mp4`` each, or one mosaic
(``--mosaic``) with a tile per stream. JSONL: a header line ``{"streams": [...]}`` naming each
stream's source, then one line per frame with its ``"stream"``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from edgert.runtime import atomic
from edgert.runtime.errors import OutputError, SourceError

from .web import HttpOutput, grid_columns  # noqa: F401 - the web viewer is an output too

log = logging.getLogger(__name__)


class Output:
    def write(self, frame, overlay_image, record: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class JsonlOutput(Output):
    """A JSON-lines log, appended to as a log is: a restart (a crash, systemd, a reboot) adds a
    run after the earlier ones, each beginning with its ``header`` line, and never erases them.
    A last line cut short by a crash is ended first, so the next line stays whole."""

    def __init__(self, path: str, header: dict | None = None) -> None:
        self.path = Path(path)
        self.failed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.path, "a+b")  # noqa: SIM115 - closed in close()
            if self.fh.tell() > 0:
                self.fh.seek(-1, os.SEEK_END)
                if self.fh.read(1) != b"\n":
                    self.fh.write(b"\n")
        except OSError as exc:
            raise OutputError(atomic.describe_os_error(exc, self.path)) from exc
        if header is not None:
            self.write(None, None, header)

    def write(self, frame, overlay_image, record: dict) -> None:
        try:
            self.fh.write((json.dumps(record) + "\n").encode())
            self.fh.flush()
        except OSError as exc:
            self.failed = True
            raise OutputError(atomic.describe_os_error(exc, self.path)) from exc

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError as exc:  # what was still buffered: said once, not over the first error
            if not self.failed:
                self.failed = True
                raise OutputError(atomic.describe_os_error(exc, self.path)) from exc


class VideoFileOutput(Output):
    """A video file. Every frame goes in at the size of the first: others are letterboxed into it
    (and counted). A write that fails (a full disk) raises OutputError, and the finished file is
    opened again and its frames counted: a file that cannot be played, or holds fewer frames than
    were written, is an error, not a success."""

    CHECK_SPACE_S = 1.0

    def __init__(self, path: str, fps: float = 30.0) -> None:
        self.path, self.fps = Path(path), fps
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
        import cv2

        from .sources import quiet_opencv

        if self.writer is None:
            h, w = overlay_image.shape[:2]
            self.size = (w, h)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = cv2.VideoWriter(
                str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h)
            )
            if not self.writer.isOpened():
                raise OutputError(
                    f"cannot write video {self.path} (no mp4v encoder in this OpenCV?)"
                )
        if overlay_image.shape[1::-1] != self.size:  # a stream whose size changed mid-run
            overlay_image = _letterbox(overlay_image, self.size)
            self.letterboxed += 1
        with quiet_opencv():
            ok = self.writer.write(overlay_image)
        if ok is False:  # OpenCV 5 says; 4.x returns None and the file is checked on close
            raise self._fail(f"writing frame {self.frames + 1} failed ({self._why()})")
        self.frames += 1
        now = time.monotonic()
        if now - self._space_checked >= self.CHECK_SPACE_S:
            self._space_checked = now
            if self._free_bytes() == 0:
                raise self._fail("no space left on the device")

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

        from .sources import quiet_opencv

        self.writer.release()
        self.writer = None
        if self.failed:
            return
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
        return {"output": str(self.path), "frames": self.frames, "letterboxed": self.letterboxed}


def stream_of(frame) -> int:
    return getattr(frame, "stream", 0)


def per_stream_path(path: Path, i: int) -> Path:
    """out.mp4 -> out_<i>.mp4"""
    return path.with_name(f"{path.stem}_{i}{path.suffix}")


class StreamFilesOutput(Output):
    """One video file per stream: ``out_<i>.mp4``."""

    def __init__(self, path: str, fps: float, streams: int) -> None:
        self.files = [
            VideoFileOutput(str(per_stream_path(Path(path), i)), fps) for i in range(streams)
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


class MosaicOutput(Output):
    """The streams tiled into one picture (letterboxed, at most 1920 pixels wide), one picture
    per round of the streams: written when a stream's tile is about to be replaced a second time,
    so a dead stream (its tile stays black, or its last frame) never holds the others up."""

    MAX_WIDTH = 1920

    def __init__(self, target: Output, streams: int) -> None:
        self.target = target
        self.cols = grid_columns(streams)
        self.rows = math.ceil(streams / self.cols)
        self.tiles: list = [None] * streams
        self.fresh: set[int] = set()
        self.tile_size: tuple[int, int] | None = None

    def write(self, frame, overlay_image, record: dict) -> None:
        i = stream_of(frame)
        if i in self.fresh:
            self._emit()
        if self.tile_size is None:
            h, w = overlay_image.shape[:2]
            scale = min(1.0, self.MAX_WIDTH / (w * self.cols))
            self.tile_size = (max(2, int(w * scale)) // 2 * 2, max(2, int(h * scale)) // 2 * 2)
        self.tiles[i] = _letterbox(overlay_image, self.tile_size)
        self.fresh.add(i)

    def _emit(self) -> None:
        tw, th = self.tile_size
        mosaic = np.zeros((th * self.rows, tw * self.cols, 3), np.uint8)
        for i, tile in enumerate(self.tiles):
            if tile is not None:
                r, c = divmod(i, self.cols)
                mosaic[r * th : (r + 1) * th, c * tw : (c + 1) * tw] = tile
        self.target.write(None, mosaic, {})
        self.fresh.clear()

    def close(self) -> None:
        try:
            if self.fresh:
                self._emit()
        finally:
            self.target.close()

    def report(self):
        return getattr(self.target, "report", dict)()


def _letterbox(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    import cv2

    tw, th = size
    h, w = image.shape[:2]
    scale = min(tw / w, th / h)
    nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
    out = np.zeros((th, tw, 3), np.uint8)
    y, x = (th - nh) // 2, (tw - nw) // 2
    out[y : y + nh, x : x + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
    return out


class DisplayOutput(Output):
    """A window (one per stream when there are several: "edgert [i]")."""

    def __init__(self, name: str = "edgert", streams: int = 1) -> None:
        import cv2

        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            raise OutputError(
                "display:// needs a display (DISPLAY is not set); use --output http://127.0.0.1:8080 or --headless"
            )
        try:
            cv2.namedWindow(name, cv2.WINDOW_NORMAL)
        except cv2.error as exc:
            raise OutputError(
                "this OpenCV has no GUI support (opencv-python-headless); use --output http://127.0.0.1:8080"
            ) from exc
        self.name = name
        self.streams = streams

    def write(self, frame, overlay_image, record: dict) -> None:
        import cv2

        name = (
            self.name
            if frame is None or not stream_of(frame)
            else f"{self.name} [{stream_of(frame)}]"
        )
        cv2.imshow(name, overlay_image)
        cv2.waitKey(1)

    def close(self) -> None:
        import cv2

        cv2.destroyAllWindows()


def _file_output(uri: str) -> str | None:
    if uri.startswith("file://") or uri.endswith((".mp4", ".avi", ".mkv")):
        return uri[len("file://") :] if uri.startswith("file://") else uri
    return None


def output_paths(uris: list[str], streams: int = 1, mosaic: bool = False) -> list[tuple[str, Path]]:
    """(what, path) of every file the outputs ``uris`` write (a file per stream when there are
    several streams and no mosaic)."""
    found = []
    for uri in uris:
        path = _file_output(uri)
        if path is None:
            continue
        if streams > 1 and not mosaic:
            found += [
                (f"--output {uri} (stream {i})", per_stream_path(Path(path), i))
                for i in range(streams)
            ]
        else:
            found.append((f"--output {uri}", Path(path)))
    return found


def open_output(uri: str, fps: float = 30.0, streams: int = 1, mosaic: bool = False) -> Output:
    """The output for ``uri``; ``streams``: how many camera streams it shows (a video file is
    written per stream, or one mosaic of all)."""
    if uri.startswith("display://"):
        if mosaic and streams > 1:
            return MosaicOutput(DisplayOutput(), streams)
        return DisplayOutput(streams=streams)
    if uri.startswith("http://"):
        parsed = urlparse(uri)
        try:
            port = parsed.port
        except ValueError:
            port = -1
        if port is not None and not 0 <= port <= 65535:
            raise OutputError(
                f"{uri}: the port must be a number from 0 to 65535 (0 picks a free one)"
            )
        return HttpOutput(parsed.hostname or "127.0.0.1", 8080 if port is None else port,
                          streams=streams)  # fmt: skip
    path = _file_output(uri)
    if path is not None:
        if streams > 1 and mosaic:
            return MosaicOutput(VideoFileOutput(path, fps), streams)
        if streams > 1:
            return StreamFilesOutput(path, fps, streams)
        return VideoFileOutput(path, fps)
    raise SourceError(
        f"unsupported output {uri!r}; supported: display://0, http://HOST:PORT, file://out.mp4"
    )


def frame_record(frame, t0: float) -> dict:
    return {
        "stream": frame.stream,
        "frame": frame.index,
        "t": round(frame.t_capture - t0, 4),
        "results": frame.results,
        "latency_ms": {k: round(v, 3) for k, v in frame.timings.items()},
    }


def now() -> float:
    return time.monotonic()
