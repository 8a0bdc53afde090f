"""Frames scaled in the decoder (apps/camera/fit.py, ``--decoder-scale``): the GStreamer chains for
a Jetson's element set and a PC's as pure descriptions, when a run scales (no sink needs the
camera's pixels) and when it keeps full frames, and a real GStreamer run of a rendered scene whose
boxes land on the same camera pixels with and without scaling."""

from __future__ import annotations

import json
import os
import threading

import cv2
import numpy as np
import pytest

from edgert.apps.camera import gstreamer
from edgert.apps.camera.fit import decoder_fit, describe
from edgert.apps.camera.gate import GateOptions
from edgert.apps.camera.sources import CaptureSource, GstFileSource, SourceOptions
from edgert.runtime.bundle import Bundle
from edgert.runtime.preprocess import Preprocessing
from tests.conftest import run_cli
from tests.tiny import blob_detector_bundle

IN_CI = bool(os.environ.get("CI"))
PC = {"rtph264depay", "h264parse", "avdec_h264", "videoconvert", "videoscale", "appsink"}
JETSON = PC - {"avdec_h264"} | {"nvv4l2decoder", "nvvidconv"}
LETTERBOX = Preprocessing(size=(640, 640), resize="letterbox", interpolation="bilinear")


def _fit(pre: Preprocessing = LETTERBOX) -> gstreamer.Fit:
    return gstreamer.Fit(lambda w, h: pre.decode_size((h, w)), pre.interpolation)


def test_the_chains_that_scale_for_a_jetson_and_for_a_pc():
    chain, _ = gstreamer.decode_chain("H264", JETSON, fit=_fit())
    # the VIC scales and converts in one pass; its caps get the size once the decoder says its own
    assert chain == (
        "rtph264depay ! h264parse ! nvv4l2decoder ! nvvidconv name=scale "
        "interpolation-method=1 ! capsfilter name=fit caps=video/x-raw,format=BGRx"
    )
    chain, _ = gstreamer.decode_chain("H264", PC, fit=_fit())
    # scaled before the colour conversion: videoconvert converts the model's pixels
    assert chain == (
        "rtph264depay ! h264parse ! avdec_h264 thread-type=slice ! videoscale name=scale "
        "method=1 ! capsfilter name=fit caps=video/x-raw ! videoconvert ! "
        "capsfilter caps=video/x-raw,format=BGR"
    )
    area = Preprocessing(size=(224, 224), resize="stretch", interpolation="area")
    assert "method=4" in gstreamer.file_pipeline("a.mp4", PC, _fit(area)).rest
    assert "interpolation-method=4" in gstreamer.file_pipeline("a.mp4", JETSON, _fit(area)).rest
    # no fit, or no videoscale on the machine: the chains as before
    assert "scale" not in gstreamer.decode_chain("H264", PC)[0]
    assert "scale" not in gstreamer.decode_chain("H264", PC - {"videoscale"}, fit=_fit())[0]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    d = tmp_path_factory.mktemp("fit")
    return {
        "letterbox": blob_detector_bundle(d / "lb", 640, 640, "letterbox"),
        "stretch": blob_detector_bundle(d / "st", 360, 640, "stretch"),
    }


@pytest.mark.parametrize(
    ("sinks", "gate", "scale", "why"),
    [
        (["jsonl://a.jsonl", "mqtt://broker/cams"], "off", "auto", None),
        (["jsonl://a.jsonl", "http://127.0.0.1:8080"], "off", "auto", "http:// shows or keeps"),
        (["snapshots://shots"], "off", "auto", "snapshots:// shows or keeps"),
        (["events://e.jsonl"], "motion", "auto", "the motion gate compares them"),
        (["jsonl://a.jsonl"], "off", "off", None),
    ],
)
def test_a_run_scales_only_where_no_sink_needs_the_cameras_pixels(bundles, sinks, gate, scale, why):
    opts, said = decoder_fit(
        SourceOptions(decoder_scale=scale),
        sinks,
        GateOptions(mode=gate),
        Bundle(bundles["stretch"]),
    )
    assert (opts.fit is not None) == (why is None and scale == "auto")
    assert (said is None) == (why is None) and (why or "") in (said or "")
    if opts.fit is not None:
        assert opts.fit.size(1280, 720) == (640, 360) and opts.fit.size(640, 360) is None
    # a bare model (no bundle) or a model that takes frames as they are: nothing to scale to
    assert decoder_fit(SourceOptions(), sinks, GateOptions(), None)[0].fit is None


def _scene(path, frames: int = 24):
    """A bright 48-pixel square crossing a dark 1280x720 scene (MPEG-4 part 2: GStreamer's libav
    decodes it as it does a camera's H.264)."""
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (1280, 720))
    for i in range(frames):
        f = np.full((720, 1280, 3), 20, np.uint8)
        x, y = 200 + 37 * i, 150 + 17 * i
        cv2.rectangle(f, (x, y), (x + 47, y + 47), (255, 255, 255), -1)
        out.write(f)
    out.release()
    return path


def _gst_ready() -> bool:
    if not gstreamer.available()[0]:
        return False
    Gst = gstreamer.gst()
    return all(Gst.ElementFactory.find(n) for n in ("avdec_mpeg4", "qtdemux", "videoscale"))


needs_gst = pytest.mark.skipif(
    not IN_CI and not _gst_ready(), reason="GStreamer with libav (.ci/run installs it)"
)


@needs_gst
def test_a_gstreamer_file_source_gives_model_sized_frames_that_know_their_size(tmp_path):
    video = _scene(tmp_path / "scene.mp4", 3)
    source = GstFileSource(str(video), fit=_fit())
    ffmpeg = CaptureSource(str(video), "video")
    try:
        assert source.size == (1280, 720)  # the camera's size, as without scaling
        image, _ = source.read()
        assert image.shape == (360, 640, 3) and source.scaled_from == (720, 1280)
        # the start-up line says which path each source takes
        said = describe([source, ffmpeg], SourceOptions(fit=_fit()), None)
        assert "GStreamer scales source 0's frames to the model's input" in said
        assert "FFmpeg gives source 1's full frames, resized by edgert" in said
        assert describe([source], SourceOptions(), "full frames: http:// shows or keeps them")
        assert describe([ffmpeg], SourceOptions(), "full frames: http:// ...") is None
    finally:
        source.close()
        ffmpeg.close()
    whole = GstFileSource(str(video))
    try:
        assert whole.read()[0].shape == (720, 1280, 3) and whole.scaled_from is None
    finally:
        whole.close()
    # a fit that keeps the size (the frame is the model's size already): frames unscaled
    keep = gstreamer.Fit(lambda w, h: None)
    conn = gstreamer.GstConnection(
        gstreamer.file_pipeline(str(video), gstreamer.elements(), keep),
        False,
        gstreamer.elements(),
        30.0,
        threading.Event(),
        fit=keep,
    )
    try:
        assert conn.first[0].shape == (720, 1280, 3) and conn.scaled_from is None
    finally:
        conn.close()


def _best_boxes(path) -> list:
    frames = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "results" in record:
            best = max(record["results"], key=lambda r: r["score"])
            frames.append((best["box"], best["score"]))
    return frames


@needs_gst
@pytest.mark.subprocess
@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
def test_boxes_land_on_the_same_camera_pixels_with_and_without_scaling(bundles, tmp_path, resize):
    video = _scene(tmp_path / "scene.mp4")
    got = {}
    for scale in ("auto", "off"):
        out = tmp_path / f"{scale}.jsonl"
        proc = run_cli(
            "camera", bundles[resize], "--source", video, "--decoder", "gstreamer",
            "--decoder-scale", scale, "--jsonl", out, "--headless",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert ("decoder scale: GStreamer scales frames" in proc.stdout) == (scale == "auto")
        got[scale] = _best_boxes(out)
    assert len(got["auto"]) == len(got["off"]) == 24
    for i, ((box, score), (full_box, full_score)) in enumerate(
        zip(got["auto"], got["off"], strict=True)
    ):
        truth = [200 + 37 * i, 150 + 17 * i, 200 + 37 * i + 48, 150 + 17 * i + 48]
        # the detector's anchors are 4 model pixels apart: 8 camera pixels at this scale
        assert np.abs(np.subtract(box, full_box)).max() <= 8, (i, box, full_box)
        assert np.abs(np.subtract(box, truth)).max() <= 8, (i, box, truth)
        assert score > 0.8 and full_score > 0.8
    # the scaled run saw other pixels (videoscale's, not OpenCV's), not the same frames again
    assert [s for _, s in got["auto"]] != [s for _, s in got["off"]]
