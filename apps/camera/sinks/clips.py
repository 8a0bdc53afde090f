"""``--clips DIR`` (or ``--output clips://DIR``): a short MP4 around each event, with the seconds before it, as Frigate's
recordings and DeepStream's Smart Record keep them.

Per stream, a ring of *encoded* samples covering the last ``pre`` seconds from a key frame (never
raw frames: about a megabyte a second at 720p). An RTSP camera read through GStreamer gives its own
H.264 or H.265 packets, taken after the depayloader and parser and before the decoder
(``media.PacketTap``): its clips hold the camera's video as it sent it (its key frames, its
quality; clean, no boxes), never decoded and encoded again, as NVRs record. Other sources (and
``reencode=1``) have their frames (annotated, or ``clean=1``) encoded once to H.264 (the rtsp://
output's encoder choice, a key frame every second). On an
event (``events=``: track_start, line_cross and zone_enter by default) a clip starts at the last
key frame at least ``pre`` seconds (default 5) before it and runs until ``post`` seconds (default
5) after the last event it merged. It is written by GStreamer's ``mp4mux`` as fragmented MP4 (a
fragment a second) to ``NAME.mp4.part`` and renamed to ``NAME.mp4`` when complete: a run killed
mid-clip leaves a ``.part`` that plays up to its last fragment, and nothing half-written under a
complete name. The event carries ``clip`` (the name it will have). Times are the scene's (a
file's own time, a live camera's capture time).

A clip is at most ``max_s`` seconds long (default 300): a busy scene whose events keep merging
goes on in a new file from the next key frame (split, not lost; later events name the new
file). A stream whose picture size changes (a reconnect to a camera set otherwise, or a size
change within the stream) ends its clip there and goes on in a new one: one size per file. The
ring is bounded by time (``pre`` + 30 s) and bytes (32 MB a stream): a camera whose key frames
are rarer than that is said once, and its clips then start at its next key frame.

Names carry the run's ID and are created exclusively (two runs sharing a folder never write one
name). Retention (``max_gb=``, ``keep_days=``) removes only clips edgert recorded as its own
(:mod:`.retention`: never a user's file, a link or a folder that happens to sit there), oldest
first, checked after each clip and every second while one is written; the clips being written
count against ``max_gb``, and with ``max_gb`` a clip also ends in a new file once it holds a
quarter of it, so the folder keeps to the budget. A clip a killed run left as ``NAME.mp4.part``
is finished by the next run on the folder (cut after its last whole fragment, renamed to the
name its events gave it, said and reported as ``recovered``). A write that fails (a full disk)
is the run's ``--on-output-error`` policy: stop, or go on without clips.
"""

from __future__ import annotations

import collections
import contextlib
import time
from pathlib import Path

from edgert.runtime import atomic
from edgert.runtime.errors import OutputError
from edgert.runtime.events import kind_of

from .base import Sink, SinkContext, folder_and_query, make_folder, sizes_of, streams_of, written
from .h264_file import gst_reason as _why
from .retention import Ledger

TRIGGERS = ("track_start", "line_cross", "zone_enter")
EVENTS = ("track_start", "track_end", "line_cross", "zone_enter", "zone_exit")
RING_SLACK_S = 30.0  # the ring spans at most pre + this (a key frame rarer than that: said)
RING_MAX_BYTES = 32 << 20  # and holds at most this much per stream
KNOWN = ("pre", "post", "events", "clean", "max_gb", "keep_days", "bitrate", "reencode", "max_s")
KNOWN += ("streams",)  # the query's keys


def options(uri: str) -> dict:
    folder, q = folder_and_query(uri, "clips", KNOWN)
    try:
        o = {
            "folder": folder,
            "pre": float(q.get("pre", 5)),
            "post": float(q.get("post", 5)),
            "max_s": float(q.get("max_s", 300)),
            "max_gb": float(q["max_gb"]) if "max_gb" in q else None,
            "keep_days": float(q["keep_days"]) if "keep_days" in q else None,
            "kbps": int(q.get("bitrate", 4000)),
        }
    except ValueError:
        raise OutputError(
            "clips: pre, post, max_s, max_gb, keep_days and bitrate are numbers"
        ) from None
    if not (0 <= o["pre"] <= 60 and 0 <= o["post"] <= 600 and 100 <= o["kbps"] <= 100_000):
        raise OutputError(
            "clips: pre must be 0 to 60 s, post 0 to 600 s, bitrate 100 to 100000 kbit/s"
        )
    if not 1 <= o["max_s"] <= 86400:
        raise OutputError("clips: max_s (a clip's longest) is 1 to 86400 seconds")
    if any(o[k] is not None and not 0 < o[k] < float("inf") for k in ("max_gb", "keep_days")):
        raise OutputError("clips: max_gb and keep_days are numbers above 0")
    o["events"] = tuple(e for e in q.get("events", ",".join(TRIGGERS)).split(",") if e)
    wrong = [e for e in o["events"] if e not in EVENTS]
    if wrong or not o["events"]:
        raise OutputError(
            f"clips: events= names {'no event' if not wrong else repr(wrong[0])}; "
            f"give one or more of {', '.join(EVENTS)}"
        )
    o["clean"] = q.get("clean", "0") in ("1", "true", "yes")
    o["reencode"] = q.get("reencode", "0") in ("1", "true", "yes")
    o["streams"] = streams_of(q, "clips")  # None: every stream's clips
    return o


class _Stream:
    """One stream's encoder, its ring of encoded samples, and the clip being written."""

    def __init__(self, out: ClipsOutput, stream: int, tap=None) -> None:
        self.out, self.stream = out, stream
        self.tap = tap  # an RTSP camera's own packets (media.PacketTap), or None: encode
        self._connection = 0  # the tap's segment the ring holds (a connection, a picture size)
        self.codec = "h264"
        self.encoder = None  # (pipeline, appsrc, appsink) once the first frame gives the size
        self.size: tuple | None = None  # the picture size the encoder was opened for
        self.ring: collections.deque = collections.deque()  # (pts ns, key frame, bytes, dts ns)
        self.ring_bytes = 0
        self.rare_keys = False  # said once: key frames rarer than the ring can hold
        self.t0: float | None = None
        self.pending: collections.deque = collections.deque()  # PTS of frames not yet encoded
        self.clip = None  # the clip being written (ClipsOutput.start_clip's dict)

    def _open(self, width: int, height: int) -> None:
        from edgert.apps.camera.media import encode_chain

        Gst = self.out.Gst
        caps = f"video/x-raw,format=BGR,width={width},height={height},framerate={self.out.fps_frac}"
        pipe = Gst.parse_launch(
            f"appsrc name=src format=time caps={caps} ! "
            f"{encode_chain(self.out.encoder, self.out.o['kbps'], self.out.gop)} ! "
            "h264parse config-interval=-1 ! video/x-h264,stream-format=byte-stream,alignment=au ! "
            "appsink name=sink sync=false"
        )
        pipe.set_state(Gst.State.PLAYING)
        self.encoder = (pipe, pipe.get_by_name("src"), pipe.get_by_name("sink"))
        self.size = (width, height)

    @property
    def mode(self) -> str:
        return f"the camera's own {self.codec}" if self.tap is not None else self.out.encoder

    def _packets(self) -> bool:
        """The camera's packets since the last frame into the ring; False when its stream turned
        out not to be H.264 or H.265 (decodebin's): its frames are encoded instead."""
        packets = self.tap.drain()
        if self.tap.codec is None and not packets:
            self.tap = None
            return False
        self.codec = self.tap.codec or self.codec
        for t_pts, t_dts, key, data, connection in packets:
            if connection != self._connection:  # the camera came back (a reboot) or changed
                self._connection = connection  # its picture size: what was kept of the stream
                self._new_segment(t_pts)  # before ends here (one file, one stream)
            if self.t0 is None:
                if not key:
                    continue  # the ring starts at a key frame
                self.t0 = t_pts
            ns = self.out.Gst.SECOND
            self._sample(int((t_pts - self.t0) * ns), key, data, int((t_dts - self.t0) * ns))
        return True

    def _new_segment(self, t: float) -> None:
        """The stream before this point cannot go on into one file with what follows (another
        connection, another picture size): the clip ends, the ring empties, and a clip that
        was to run on goes on in a new file from the next key frame."""
        end = self.clip["end"] if self.clip is not None else None
        if self.clip is not None:
            self._finish()
        self.ring.clear()
        self.ring_bytes = 0
        if end is not None and self.t0 is not None:
            self.clip = self.out.start_clip(self.stream, t, None, end, self.codec)

    def frame(self, image, t: float) -> None:
        Gst = self.out.Gst
        if self.tap is not None and self._packets():
            return
        if self.out.encoder is None:  # an RTSP stream that was not H.264 or H.265
            raise OutputError(f"clips: stream {self.stream} needs an H.264 encoder to be kept")
        size = (image.shape[1], image.shape[0])
        if self.encoder is not None and size != self.size:  # the picture changed size
            self.encoder[0].set_state(Gst.State.NULL)
            self.encoder = None
            self.pending.clear()
            self._new_segment(t)
        if self.encoder is None:
            self._open(*size)
            if self.t0 is None:
                self.t0 = t
        _, src, sink = self.encoder
        buf = Gst.Buffer.new_wrapped(image.tobytes())
        buf.pts = int((t - self.t0) * Gst.SECOND)
        self.pending.append(buf.pts)
        src.emit("push-buffer", buf)
        wait = 200 * Gst.MSECOND  # at zero latency this frame's sample comes at once
        while True:
            sample = sink.emit("try-pull-sample", wait)
            wait = 0
            if sample is None:
                break
            b = sample.get_buffer()
            key = not b.has_flags(Gst.BufferFlags.DELTA_UNIT)
            ok, info = b.map(Gst.MapFlags.READ)
            data = bytes(info.data) if ok else b""
            if ok:
                b.unmap(info)
            # no B-frames: samples come in input order (encoders offset their own PTS: x264
            # by 1000 hours), so each is the next frame pushed
            pts = self.pending.popleft() if self.pending else b.pts
            self._sample(pts, key, data)

    def _sample(self, pts: int, key: bool, data: bytes, dts: int | None = None) -> None:
        dts = pts if dts is None else dts
        if key or self.ring:  # the ring starts at a key frame (nothing before one can play)
            self.ring.append((pts, key, data, dts))
            self.ring_bytes += len(data)
            self._trim(pts)
        clip = self.clip
        if clip is None:
            return
        if clip["start"] is None:  # a clip waiting for its first key frame
            if not key:
                return
            clip["start"] = pts
        elif key and self._full(pts):
            self._split(pts)
        self._write(pts, data, dts)
        if pts >= self.clip["end"]:
            self._finish()
        else:
            self.out.check_budget()

    def _trim(self, pts: int) -> None:
        """The ring from the last key frame at least ``pre`` before the newest sample; at most
        ``pre`` + RING_SLACK_S and RING_MAX_BYTES (then it starts at its next key frame)."""
        ns = self.out.Gst.SECOND
        keep = int(self.out.o["pre"] * ns)
        keys = [i for i, (p, k, _, _) in enumerate(self.ring) if k and p <= pts - keep]
        for _ in range(keys[-1] if keys else 0):
            self.ring_bytes -= len(self.ring.popleft()[2])
        span = int((self.out.o["pre"] + RING_SLACK_S) * ns)
        if self.ring and (pts - self.ring[0][0] > span or self.ring_bytes > RING_MAX_BYTES):
            self.ring_bytes -= len(self.ring.popleft()[2])
            while self.ring and not self.ring[0][1]:
                self.ring_bytes -= len(self.ring.popleft()[2])
            if not self.rare_keys:
                self.rare_keys = True
                self.out.say(
                    f"clips: stream {self.stream}'s key frames come more than "
                    f"{self.out.o['pre'] + RING_SLACK_S:g} s (or {RING_MAX_BYTES >> 20} MB) apart, "
                    f"more than a {self.out.o['pre']:g} s pre-roll can keep: its clips start at "
                    "its next key frame (set the camera's key-frame interval, its I-frame or GOP "
                    "length, to a few seconds)"
                )

    def _full(self, pts: int) -> bool:
        """Whether the clip being written ends here, at a key frame, to go on in a new file: it
        reached ``max_s``, or a quarter of ``max_gb``."""
        clip, o = self.clip, self.out.o
        if pts - clip["start"] >= int(o["max_s"] * self.out.Gst.SECOND):
            return True
        return o["max_gb"] is not None and clip["bytes"] >= o["max_gb"] * 1e9 / 4

    def _split(self, pts: int) -> None:
        end = self.clip["end"]
        self._finish()
        t = (self.t0 or 0.0) + pts / self.out.Gst.SECOND
        self.clip = self.out.start_clip(self.stream, t, pts, end, self.codec)

    def event(self, t: float) -> str | None:
        """An event at scene time ``t``: the clip it falls in (started, or extended)."""
        if self.t0 is None:
            return None
        Gst = self.out.Gst
        pts = int((t - self.t0) * Gst.SECOND)
        end = pts + int(self.out.o["post"] * Gst.SECOND)
        if self.clip is not None:
            self.clip["end"] = max(self.clip["end"], end)
            return str(self.clip["path"])
        start_at = pts - int(self.out.o["pre"] * Gst.SECOND)
        keys = [p for p, k, _, _ in self.ring if k and p <= start_at] or [
            p for p, k, _, _ in self.ring if k
        ]
        first = keys[-1] if keys else None  # None: none kept, the clip starts at the next one
        self.clip = self.out.start_clip(self.stream, t, first, end, self.codec)
        for p, _, data, d in list(self.ring) if first is not None else ():
            if p >= first:
                self._write(p, data, d)
        return str(self.clip["path"])

    def _write(self, pts: int, data: bytes, dts: int) -> None:
        Gst = self.out.Gst
        buf = Gst.Buffer.new_wrapped(data)
        buf.pts = max(0, pts - self.clip["start"])
        buf.dts = max(0, dts - self.clip["start"])
        self.clip["bytes"] += len(data)
        flow = self.clip["src"].emit("push-buffer", buf)
        error = self.clip["pipe"].get_bus().pop_filtered(Gst.MessageType.ERROR)
        if flow != Gst.FlowReturn.OK or error is not None:  # filesink's write failed
            part = self.clip["part"]
            self._abandon()
            raise OutputError(f"clips: cannot write {part}: {_why(error)}")

    def _finish(self) -> None:
        clip, self.clip = self.clip, None
        self.out.end_clip(clip)

    def _abandon(self) -> None:
        """A clip that cannot be finished: stopped and its .part deleted (it frees the space a
        full disk needs; only a killed process leaves a .part)."""
        clip, self.clip = self.clip, None
        with contextlib.suppress(Exception):
            clip["pipe"].set_state(self.out.Gst.State.NULL)
        self.out.drop(clip)

    def close(self) -> None:
        if self.clip is not None:
            self._finish()  # the clip ends with the run, complete
        if self.encoder is not None:
            self.encoder[0].set_state(self.out.Gst.State.NULL)
            self.encoder = None
        self.ring.clear()
        self.ring_bytes = 0


class ClipsOutput(Sink):
    takes_frames = True
    takes_events = True
    enriches_events = True

    BUDGET_EVERY_S = 1.0  # the size budget checked this often while a clip is written

    def __init__(self, uri: str, ctx: SinkContext) -> None:
        from edgert.apps.camera.media import (
            INSTALL,
            INSTALL_ENCODER,
            choose_encoder,
            elements,
            gst,
        )

        self.o = options(uri)
        self.draws = not self.o["clean"]
        self.say = ctx.say
        try:
            self.Gst = gst()
        except ImportError as exc:
            raise OutputError(f"clips:// needs GStreamer: {exc}") from None
        self.encoder, _ = choose_encoder(elements())
        if self.Gst.ElementFactory.find("mp4mux") is None:
            raise OutputError(f"clips:// needs GStreamer's mp4mux: {INSTALL}")
        self.folder = make_folder(self.o["folder"], "clips")
        fps = ctx.fps or 30.0
        self.fps_frac = f"{round(fps * 1000)}/1000"
        self.gop = max(1, round(fps))  # a key frame a second
        sources = list(ctx.sources) + [None] * (len(ctx.streams) - len(ctx.sources))
        kept = self.o["streams"]
        self.streams = [  # a stream left out (streams=) has none: no ring, no tap, no encoder
            _Stream(self, i, None if self.o["reencode"] or src is None else src.tap_packets())
            if kept is None or i in kept
            else None
            for i, src in enumerate(sources[: len(ctx.streams)])
        ]
        if self.encoder is None and any(s is not None and s.tap is None for s in self.streams):
            raise OutputError(f"clips:// needs an H.264 encoder: {INSTALL_ENCODER}")
        self.ledger = Ledger(self.folder, "clips")
        self.written: list = []
        self.deleted = 0
        self._budget_at = float("-inf")
        self._last_t: dict = {}
        self._retain()  # a killed run's clips finished, the budget kept, before the first clip
        if self.ledger.recovered:
            self.say(
                f"clips: finished {len(self.ledger.recovered)} clip(s) that a run left unfinished "
                f"(killed while writing): {', '.join(self.ledger.recovered)}"
            )

    def wants(self, frame) -> bool:
        return self.streams[frame.stream] is not None

    def write(self, frame, image, record: dict) -> None:
        t = frame.t_scene
        self._last_t[frame.stream] = t
        self.streams[frame.stream].frame(image, t)

    def events(self, events: list) -> None:
        for e in events:
            if kind_of(e) not in self.o["events"]:
                continue
            stream = e.get("stream", 0)
            t = self._last_t.get(stream)
            if t is None or self.streams[stream] is None:
                continue
            path = self.streams[stream].event(t)
            if path is not None:
                e["clip"] = path

    def start_clip(self, stream: int, t: float, start: int | None, end: int, codec: str) -> dict:
        """A clip of ``stream`` from ``start`` (None: its next key frame) to ``end`` (ns of the
        stream's ring), its name taken and recorded, its muxer writing ``NAME.mp4.part``."""
        Gst = self.Gst
        stem = time.strftime("%Y%m%d-%H%M%S", time.localtime()) + f"_s{stream}_{int(t * 1000)}"
        path = self.ledger.new_part(stem, ".mp4")
        part = path.with_name(path.name + ".part")
        pipe = Gst.parse_launch(
            f"appsrc name=src format=time caps=video/x-{codec},stream-format=byte-stream,"
            f"alignment=au ! {codec}parse ! mp4mux fragment-duration=1000 name=mux ! "
            "filesink name=file"
        )
        pipe.get_by_name("file").set_property("location", str(part))
        pipe.set_state(Gst.State.PLAYING)
        return {
            "pipe": pipe,
            "src": pipe.get_by_name("src"),
            "path": path,
            "part": part,
            "start": start,
            "end": end,
            "bytes": 0,
        }

    def end_clip(self, clip: dict) -> None:
        Gst = self.Gst
        clip["src"].emit("end-of-stream")
        msg = (
            clip["pipe"]
            .get_bus()
            .timed_pop_filtered(10 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
        )
        clip["pipe"].set_state(Gst.State.NULL)
        if clip["start"] is None:  # no key frame came: nothing to keep
            self.drop(clip)
            return
        if msg is None or msg.type != Gst.MessageType.EOS:
            self.drop(clip)  # never left as if it could be played to the end
            why = _why(msg) if msg is not None else "it did not finish within 10 s"
            raise OutputError(f"clips: cannot finish {clip['part']}: {why}")
        try:
            atomic.rename_new(clip["part"], clip["path"])
            self.ledger.done(clip["path"])
        except OSError as exc:
            raise OutputError(
                f"clips: cannot finish {clip['part']} as {clip['path'].name}: {exc.strerror or exc}"
            ) from None
        self.written.append(str(clip["path"]))
        self._retain()

    def drop(self, clip: dict) -> None:
        """A clip that will not be finished: its .part deleted, its name let go."""
        with contextlib.suppress(OSError):
            clip["part"].unlink()
        with contextlib.suppress(OutputError):
            self.ledger.forget(clip["path"])

    def check_budget(self) -> None:
        """While a clip is written: the size budget kept, once a BUDGET_EVERY_S."""
        if self.o["max_gb"] is None and self.o["keep_days"] is None:
            return
        if time.monotonic() - self._budget_at >= self.BUDGET_EVERY_S:
            self._retain()

    def _retain(self) -> None:
        self._budget_at = time.monotonic()
        self.deleted += len(self.ledger.retain(self.o["max_gb"], self.o["keep_days"]))

    def close(self) -> None:
        try:
            for s in self.streams:
                if s is not None:
                    s.close()
        finally:
            self.ledger.close()

    def report(self):
        out = {
            "clips": str(self.folder),
            "written": len(self.written),
            "deleted": self.deleted,
            "video": [s and s.mode for s in self.streams],  # an encoder, the camera's, None
        }
        if self.ledger.recovered:
            out["recovered"] = list(self.ledger.recovered)
        return out

    def wrote(self) -> list:
        """The folder, this run's clips still in it and their bytes (retention's deletions are
        ``deleted``)."""
        kept = sizes_of(self.written)
        return [
            written(
                "clips",
                self.folder,
                files=len(kept),
                bytes=sum(kept.values()),
                deleted=self.deleted,
            )
        ]


def open_uri(uri: str, ctx: SinkContext) -> ClipsOutput:
    return ClipsOutput(uri, ctx)


def check(uri: str, _options=None) -> None:
    options(uri)


def paths(uri: str, streams: int, mosaic: bool) -> list:
    return [(f"--output {uri}", Path(options(uri)["folder"]))]
