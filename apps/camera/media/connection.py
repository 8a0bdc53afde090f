"""One running GStreamer pipeline ending in an appsink (:class:`GstConnection`): built from a
:class:`~.describe.Launch`, read frame by frame, closed with every reference let go."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from edgert.runtime.errors import StreamLost

from .describe import SINK_CAPS, Fit, Launch, Views, appsink, decode_chain, paced
from .load import gst
from .tap import PacketTap

log = logging.getLogger(__name__)


def _caps_size(caps) -> tuple | None:
    """(width, height) of a parser's caps, None when it does not say."""
    if caps is None or caps.get_size() == 0:
        return None
    s = caps.get_structure(0)
    ok_w, w = s.get_int("width")
    ok_h, h = s.get_int("height")
    return (w, h) if ok_w and ok_h else None


def bgr_copy(data, w: int, h: int, fmt: str) -> np.ndarray:
    """A BGR frame (its own memory) from a mapped BGR or BGRx buffer of ``w`` x ``h``: rows are
    padded (BGR to 4 bytes); BGRx loses its fourth byte in the same single copy."""
    import cv2

    stride = len(data) // h
    rows = np.frombuffer(data, np.uint8, count=stride * h).reshape(h, stride)
    if fmt == "BGRx":
        return cv2.cvtColor(rows[:, : w * 4].reshape(h, w, 4), cv2.COLOR_BGRA2BGR)
    return rows[:, : w * 3].reshape(h, w, 3).copy()


def _named_values(spec) -> bool:
    """Whether a property takes one of GLib's named flags or enum values."""
    from gi.repository import GObject

    return GObject.type_is_a(spec.value_type, GObject.TYPE_FLAGS) or GObject.type_is_a(
        spec.value_type, GObject.TYPE_ENUM
    )


class GstConnection:
    """One running pipeline ending in an appsink, built from a :class:`Launch`: its first element
    made by name with its properties set as values, then the rest of the description. For RTSP
    (``rtspsrc`` alone) the video pad is linked, once it appears, to the decode chain of its
    codec (:func:`decode_chain`), and other pads (audio) to a fakesink.

    :meth:`close` takes the pipeline to NULL and lets go of every reference to it (the pad-added
    handler too, which held this object from inside GLib): a failed attempt or a dropped stream
    leaves no socket, poll descriptor or thread behind, however often a camera is retried."""

    def __init__(
        self,
        launch: Launch,
        live: bool,
        have: set[str],
        timeout_s: float,
        cancel: threading.Event,
        tap: PacketTap | None = None,
        fit: Fit | None = None,
    ) -> None:
        Gst = gst()
        self.Gst, self.live, self.have, self.tap, self.fit = Gst, live, have, tap, fit
        self._probe: tuple | None = None  # (the scaler's sink pad, the probe that fits it)
        self._fitted: tuple | None = None  # ((W, H) the decoder scales to, (h, w) it came from)
        self._fit_el: tuple | None = None  # (the capsfilter "fit", its caps without a size)
        self._fit_lock = threading.Lock()  # the streaming thread fits, the reader reads the fit
        self.scaled_from: tuple | None = None  # the last frame's, None: it came unscaled
        # the full-picture branch (a Demand): (its queue's sink pad, the probe that thins it,
        # its appsink, the appsink's new-sample handler); whether it is open and the next
        # picture's PTS on its grid; the pictures it gave; the last frame's own
        self._view: tuple | None = None
        self._open = False
        self._due: float | None = None  # seconds of PTS
        self.views = Views()
        self.view = None
        self.decoder: str | None = None
        self.pipeline = None
        self._src = None
        self._handler: int | None = None
        self._tapped: tuple | None = None  # (the packets appsink, its new-sample handler)
        self._connection = 0  # this connection's number on the tap
        self._tap_size = None  # the picture size its parser last said
        try:
            self._build(launch)
        except BaseException:
            self.close()
            raise
        self.bus = self.pipeline.get_bus()
        self.media_time: float | None = None
        self._linked = False
        self._error: str | None = None
        self._problem: StreamLost | None = None
        self._drained = time.monotonic()
        try:
            self.pipeline.set_state(Gst.State.PLAYING)
            self.first = self.read(timeout_s, cancel, connecting=True)
        except BaseException:
            self.close()
            raise

    def _build(self, launch: Launch) -> None:
        Gst = self.Gst
        if launch.rest:  # ours: fixed strings and numbers, its first element named "head"
            try:
                self.pipeline = Gst.parse_launch(launch.rest)
            except Exception as exc:  # noqa: BLE001 - GLib.Error: an element this machine lacks
                raise StreamLost(
                    f"GStreamer cannot build {launch.rest.split()[0]}: {exc}"
                ) from None
        else:
            self.pipeline = Gst.Pipeline.new(None)
        src = Gst.ElementFactory.make(launch.element, "src")
        if src is None:
            raise StreamLost(f"GStreamer has no {launch.element} element")
        self.pipeline.add(src)
        self._src = src
        for name, value in launch.props:
            spec = src.find_property(name)
            if spec is None:
                raise StreamLost(f"{launch.element} has no property {name}")
            try:
                if _named_values(spec):  # tcp, udp: GStreamer's own parser for the names
                    Gst.util_set_object_arg(src, name, str(value))
                else:
                    src.set_property(name, value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise StreamLost(f"could not set {launch.element}'s {name}: {exc}") from None
        if launch.rest:
            head = self.pipeline.get_by_name("head")
            if head is None or not src.link(head):
                raise StreamLost(
                    f"GStreamer cannot link {launch.element} to {launch.rest.split()[0]}"
                )
            self.sink = self.pipeline.get_by_name("sink")
            self.decoder = "decodebin" if "decodebin" in launch.rest else launch.element
            self._watch_fit(self.pipeline)
        else:  # RTSP: the chain is chosen by the stream's codec
            self.sink = Gst.parse_launch(appsink(self.live))
            self.pipeline.add(self.sink)
            self._handler = src.connect("pad-added", self._pad_added)
        self.sink.set_property("caps", Gst.Caps.from_string(SINK_CAPS))

    def _pad_added(self, _src, pad) -> None:
        Gst = self.Gst
        pipeline = self.pipeline
        if pipeline is None:  # closed meanwhile
            return
        caps = pad.get_current_caps() or pad.query_caps(None)
        s = caps.get_structure(0)
        media = s.get_string("media") if s.has_field("media") else ""
        if self._linked or (media and media != "video"):
            sink = Gst.ElementFactory.make("fakesink")
            pipeline.add(sink)
            sink.sync_state_with_parent()
            pad.link(sink.get_static_pad("sink"))
            return
        codec = s.get_string("encoding-name") if s.has_field("encoding-name") else ""
        chain, self.decoder = decode_chain(codec or "", self.have, self.tap is not None, self.fit)
        log.debug("RTSP %s stream: %s", codec, chain)
        try:
            bin_ = Gst.parse_bin_from_description(chain, True)
        except Exception as exc:  # noqa: BLE001 - GLib.Error: reported by read()
            self._error = f"cannot build the decoder for {codec}: {exc}"
            return
        packets = bin_.get_by_name("packets")
        if packets is not None:
            self.tap.codec = codec.lower()
            self.tap.connection += 1
            self._connection = self.tap.connection
            self._tap_size = None
            self._tapped = (packets, packets.connect("new-sample", self._packet))
        self._watch_fit(bin_)
        pipeline.add(bin_)
        bin_.link(self.sink)
        bin_.sync_state_with_parent()
        pad.link(bin_.get_static_pad("sink"))
        self._linked = True

    def _watch_fit(self, where) -> None:
        """With a ``fit``: when the decoded size is known (a CAPS event reaching the scaler) the
        capsfilter ``fit`` after it is given the model's size for it, before the scaler asks what
        it may output; again when a camera changes resolution. The full-picture branch's
        appsink (a demand) keeps what it is given."""
        if self.fit is None:
            return
        Gst = self.Gst
        queue, full = where.get_by_name("view"), where.get_by_name("full")
        if queue is not None and full is not None:
            into = queue.get_static_pad("sink")
            self._view = (
                into,
                into.add_probe(Gst.PadProbeType.BUFFER, self._thin),
                full,
                full.connect("new-sample", self._viewed),
            )
        scale, fit = where.get_by_name("scale"), where.get_by_name("fit")
        if scale is None or fit is None:
            return
        base = fit.get_property("caps").to_string()  # video/x-raw[,format=BGRx]
        pad = scale.get_static_pad("sink")

        def on_event(_pad, info):
            event = info.get_event()
            if event is not None and event.type == Gst.EventType.CAPS:
                self._fit_caps(event.parse_caps(), fit, base)
            return Gst.PadProbeReturn.OK

        self._probe = (pad, pad.add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, on_event))

    def _fit_caps(self, caps, fit, base: str) -> None:
        size = _caps_size(caps)
        if size is None:
            return
        w, h = size
        target = self.fit.size(w, h)
        with self._fit_lock:
            # only the current size's: a camera that switches to a mode of the model's size sends
            # its frames unscaled, and they must not read as scaled from the mode before. Kept
            # while full frames are let through: a frame is scaled when it has the model's size
            self._fitted = None if target is None else (tuple(target), (h, w))
            self._fit_el = (fit, base)
            text = base
            if target is not None:
                text = f"{base},width={target[0]},height={target[1]},pixel-aspect-ratio=1/1"
            log.debug("decoder scale: %s", text)
            fit.set_property("caps", self.Gst.Caps.from_string(text))

    def _thin(self, _pad, info):
        """The branch's input (the decoder's thread): every buffer dropped while it is closed;
        open, one kept each 1/fps of PTS on a grid (:func:`paced`), started again when it opens.
        Events pass: a flush or the end of the stream reaches the appsink."""
        Gst = self.Gst
        buf = info.get_buffer()
        if not self._open or buf is None or buf.pts == Gst.CLOCK_TIME_NONE:
            return Gst.PadProbeReturn.DROP
        taken, self._due = paced(self._due, buf.pts / Gst.SECOND, 1.0 / self.fit.demand.fps)
        return Gst.PadProbeReturn.OK if taken else Gst.PadProbeReturn.DROP

    def _viewed(self, sink):
        """A full picture from the branch (its streaming thread, at the demand's rate): copied
        out of GStreamer's memory and kept by its PTS for the frame of the same PTS."""
        Gst = self.Gst
        sample = sink.emit("pull-sample")
        if sample is not None:
            buf = sample.get_buffer()
            s = sample.get_caps().get_structure(0)
            ok, info = buf.map(Gst.MapFlags.READ)
            if ok:
                try:
                    picture = bgr_copy(
                        info.data,
                        s.get_value("width"),
                        s.get_value("height"),
                        s.get_value("format"),
                    )
                finally:
                    buf.unmap(info)
                if buf.pts != Gst.CLOCK_TIME_NONE:
                    self.views.put(buf.pts, picture)
        return Gst.FlowReturn.OK

    def _follow_demand(self, pts: int, scaled: bool) -> None:
        """The branch open while this stream's demand is held and the frames come scaled (else
        the frames are the pictures), closed otherwise (checked with every frame read; each
        change lets go of the pictures kept, so none from before reaches a frame after);
        ``view``: the full picture this frame takes (its own, or one whose frame went by)."""
        self.view = None
        if self._view is None:
            return
        wanted = scaled and self.fit.demand.wanted(self.fit.stream)
        if wanted != self._open:
            self._due = None
            self._open = wanted
            self.views.clear()
        if wanted and pts != self.Gst.CLOCK_TIME_NONE:
            self.view = self.views.take(pts)

    def _packet(self, sink):
        """One access unit for the tap (GStreamer's streaming thread)."""
        Gst = self.Gst
        sample = sink.emit("pull-sample")
        if sample is not None and self.tap is not None:
            buf = sample.get_buffer()
            pts = self._stamp(buf.pts)
            dts = pts if buf.dts == Gst.CLOCK_TIME_NONE else self._stamp(buf.dts)
            key = not buf.has_flags(Gst.BufferFlags.DELTA_UNIT)
            data = buf.extract_dup(0, buf.get_size())
            size = _caps_size(sample.get_caps())
            if None not in (size, self._tap_size) and size != self._tap_size:
                self.tap.connection += 1  # the picture's size changed within the stream: a new
                self._connection = self.tap.connection  # segment (one size per clip)
            self._tap_size = size or self._tap_size
            self.tap.put((pts, dts, key, data, self._connection))
        return Gst.FlowReturn.OK

    def _stamp(self, pts: int) -> float:
        """A live buffer's time on CLOCK_MONOTONIC (running time + base time on the pipeline's
        system clock), as our capture times; now where that cannot be known."""
        now = time.monotonic()
        if pts == self.Gst.CLOCK_TIME_NONE:
            return now
        clock = self.pipeline.get_clock() if self.pipeline is not None else None
        if clock is not None and isinstance(clock, self.Gst.SystemClock):
            stamped = (self.pipeline.get_base_time() + pts) / 1e9
            if now - 10.0 < stamped <= now:
                return stamped
        return now

    def _bus_problem(self) -> StreamLost | None:
        """The first error or end of stream on the bus. Every message is taken off it (no main
        loop drains this bus: left there, messages would pile up over a long run)."""
        Gst = self.Gst
        while self._problem is None:
            msg = self.bus.pop()
            if msg is None:
                break
            if msg.type == Gst.MessageType.EOS:
                self._problem = StreamLost("the stream ended (end of stream)")
            elif msg.type == Gst.MessageType.ERROR:
                err, _debug = msg.parse_error()
                self._problem = StreamLost(err.message.rstrip("."))
        if self._error:
            return StreamLost(self._error)
        return self._problem

    def read(self, timeout_s: float, cancel: threading.Event, connecting: bool = False):
        """The next (frame, capture time); None at the end of a file; StreamLost when the stream ends,
        fails, or sends nothing for ``timeout_s`` (a stall)."""
        Gst = self.Gst
        deadline = time.monotonic() + timeout_s
        while True:
            sample = self.sink.try_pull_sample(Gst.SECOND // 10)
            if sample is not None:
                if time.monotonic() - self._drained > 1.0:  # keep the bus empty while frames flow
                    self._drained = time.monotonic()
                    self._bus_problem()
                return self._frame(sample)
            problem = self._bus_problem()
            if problem is not None:
                if not self.live and str(problem).endswith("(end of stream)"):
                    if self.sink.is_eos():
                        return None
                    self._problem = None  # an end said before a rewind: not this loop's
                else:
                    raise problem
            if self.sink.is_eos():
                if not self.live:
                    return None
                raise StreamLost("the stream ended (end of stream)")
            if cancel.is_set():
                raise StreamLost("stopped")
            if time.monotonic() >= deadline:
                if connecting:
                    raise StreamLost("no frame yet")
                raise StreamLost(f"stalled: no frame for {timeout_s:g} s", stalled=True)

    def _frame(self, sample):
        Gst = self.Gst
        buf = sample.get_buffer()
        s = sample.get_caps().get_structure(0)
        w, h = s.get_value("width"), s.get_value("height")
        ok, info = buf.map(Gst.MapFlags.READ)
        if not ok:
            raise StreamLost("a frame could not be read from GStreamer's memory")
        try:
            frame = bgr_copy(info.data, w, h, s.get_value("format"))
        finally:
            buf.unmap(info)
        fitted = self._fitted
        self.scaled_from = fitted[1] if fitted is not None and fitted[0] == (w, h) else None
        self._follow_demand(buf.pts, self.scaled_from is not None)
        if not self.live:
            if buf.pts != Gst.CLOCK_TIME_NONE:
                self.media_time = buf.pts / 1e9
            return frame, time.monotonic()
        return frame, self._stamp(buf.pts)

    def fps(self) -> float | None:
        pad = self.sink.get_static_pad("sink")
        caps = pad.get_current_caps() if pad is not None else None
        if caps is None:
            return None
        ok, num, den = caps.get_structure(0).get_fraction("framerate")
        return num / den if ok and num > 0 and den > 0 else None

    def rewind(self) -> bool:
        """Back to the start (a looped file): pictures of the loop before are let go, and so is
        the end of the stream the bus said (kept, it would end the next loop at its first pull
        slower than 100 ms). The picture branch drops buffers only, so the seek's flush reaches
        its appsink (a closed valve dropped it: the appsink stayed at its end and, once open,
        stopped the decoder)."""
        Gst = self.Gst
        self._forget_end()
        try:
            done = self.pipeline.seek_simple(
                Gst.Format.TIME, Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT, 0
            )
            if done:
                # the bin says its end once every sink is at its end: the picture branch's
                # appsink may get there after the model's, so that end can reach the bus after
                # the forgetting above (seen in CI). Once the flush is done it is there: forgotten
                self.pipeline.get_state(5 * Gst.SECOND)
                self._forget_end()
            return done
        finally:
            self.views.clear()

    def _forget_end(self) -> None:
        """What the bus said so far taken off it; an end of stream among it no longer counts."""
        self._bus_problem()
        if self._problem is not None and str(self._problem).endswith("(end of stream)"):
            self._problem = None

    def close(self) -> None:
        """NULL, then every reference dropped: the pipeline, its bus, sockets and threads go."""
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is None:
            return
        if self._handler is not None and self._src is not None:
            self._src.disconnect(self._handler)
        self._handler = None
        if self._tapped is not None:
            self._tapped[0].disconnect(self._tapped[1])
            self._tapped = None
        if self._probe is not None:  # its closure holds this object
            self._probe[0].remove_probe(self._probe[1])
            self._probe = None
        if self._view is not None:  # its probe and handler hold this object
            self._view[0].remove_probe(self._view[1])
            self._view[2].disconnect(self._view[3])
            self._view = None
        self.views.clear()
        self.view = None
        self._fit_el = None
        pipeline.set_state(self.Gst.State.NULL)
        pipeline.get_state(self.Gst.CLOCK_TIME_NONE)  # the state change done (threads joined)
        self._src = self.sink = self.bus = None
