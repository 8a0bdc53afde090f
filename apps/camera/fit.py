"""Whether a camera run's frames are scaled in the decoder (``--decoder-scale``): when no sink
shows or keeps the camera's pixels, GStreamer scales each frame to the size the model's
preprocessing resizes it to (``videoscale`` before the colour conversion; ``nvvidconv`` on a
Jetson's VIC), so the CPU converts and copies the model's pixels, not the camera's. A frame then
carries the size it came from (``Frame.source_hw``): the preprocessing's transform, and so every
box, line and zone, stays in the camera's pixels. The web viewer needs the camera's pictures only
while one of its video streams is watched, and at its own rate: the decoded frames are split
(a ``tee``), and the full-picture branch, closed until someone watches (:class:`media.Demand`),
converts frames at up to the viewer's rate (``?fps=N``) and hands each with the scaled frame of
the same time (``Frame.view``); the model's frames are scaled whether watched or not. FFmpeg
(OpenCV) gives full frames, which the preprocessing resizes as before."""

from __future__ import annotations

import dataclasses

from . import media
from .sinks import needs_frames, view_rate


def decoder_fit(opts, uris: list, gate, bundle, crops: bool = False) -> tuple[object, str | None]:
    """(the source options, with ``fit`` set where the decoder may scale, and a sentence on the
    choice or None when there is nothing to choose). ``uris``: the run's sinks; ``gate``: its
    GateOptions (the motion gate takes scaled frames too: its working picture is 320 pixels wide
    whatever it comes from, its masks and regions in the camera's pixels);
    ``bundle``: the model's (None for a bare .onnx), whose preprocessing says the size;
    ``crops``: a second stage crops the tracked objects from the camera's pixels."""
    pre = bundle.manifest.preprocessing if bundle is not None else None
    if opts.decoder_scale == "off" or pre is None or pre.resize == "none":
        return opts, None
    if crops:
        return opts, "full frames: --secondary crops the tracked objects from them"
    full = [u for u in uris if needs_frames(u) and view_rate(u) is None]
    if full:
        return opts, f"full frames: {full[0].split('://')[0]}:// shows or keeps them"
    # the web viewer: its pictures, at its rate, while one of its video streams is watched
    viewers = [u for u in uris if needs_frames(u)]
    have = media.elements() if viewers else set()  # none without GStreamer (FFmpeg runs)
    if have and not media.VIEW_ELEMENTS.issubset(have):
        return opts, "full frames: this GStreamer lacks the web viewer's branch (tee, queue)"
    demand = media.Demand(max(view_rate(u) for u in viewers)) if viewers else None
    size = lambda w, h: pre.decode_size((h, w))  # noqa: E731
    fit = media.Fit(
        _motion_sized(size) if gate.motion_anywhere else size, pre.interpolation, demand
    )
    return dataclasses.replace(opts, fit=fit), None


def _motion_sized(size):
    """``size``, but None (the frame kept whole) where the model's size is smaller than the
    motion gate's working picture of that frame (at most 320 wide): motion is found in what the
    model would not see too."""
    from .motion import WIDTH

    def fit(w: int, h: int):
        got = size(w, h)
        s = min(WIDTH / w, WIDTH / h)
        if got is None or got[0] < round(w * s) or got[1] < round(h * s):
            return None
        return got

    return fit


def describe(sources: list, opts, why: str | None) -> str | None:
    """Which sources' frames are scaled in the decoder and which come whole, for the start-up
    lines; None when no source decodes video (images, synthetic frames)."""
    kinds = [_decodes(s) for s in sources]
    if not any(kinds):
        return None
    if opts.fit is None:
        return why if "gstreamer" in kinds else None
    said = []
    if "gstreamer" in kinds:
        scaler = "nvvidconv" if media.hardware_decoder(media.elements()) else "videoscale"
        said.append(
            f"GStreamer scales{_which(kinds, 'gstreamer')} frames to the model's input ({scaler})"
            + (
                f", the camera's pictures at up to {opts.fit.demand.fps} fps while the web viewer "
                "is watched"
                if opts.fit.demand
                else ""
            )
        )
    if "ffmpeg" in kinds:
        said.append(
            f"FFmpeg gives{_which(kinds, 'ffmpeg')} full frames, resized by edgert "
            "(--decoder gstreamer scales them in the decoder)"
        )
    return "; ".join(said)


def _which(kinds: list, kind: str) -> str:
    """The words naming the sources of ``kind`` (" source 1, 2's") when only some are of it;
    nothing when all are (one source, too)."""
    picked = [str(i) for i, k in enumerate(kinds) if k == kind]
    return f" source {', '.join(picked)}'s" if len(picked) < len(kinds) else ""


def _decodes(source) -> str | None:
    """gstreamer or ffmpeg: who decodes the source's video, as the source declares it (None:
    images, synthetic frames, an object that only reads)."""
    return getattr(source, "decodes", None)
