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

from edgert.apps.camera import media
from edgert.apps.camera.fit import decoder_fit, describe
from edgert.apps.camera.gate import GateOptions
from edgert.apps.camera.sources import CaptureSource, GstFileSource, SourceOptions
from edgert.runtime.bundle import Bundle
from edgert.runtime.images.preprocess import Preprocessing
from tests.conftest import run_cli
from tests.tiny import blob_detector_bundle

pytestmark = pytest.mark.gst

IN_CI = bool(os.environ.get("CI"))
PC = {"rtph264depay", "h264parse", "avdec_h264", "videoconvert", "videoscale", "appsink"}
JETSON = PC - {"avdec_h264"} | {"nvv4l2decoder", "nvvidconv"}
LETTERBOX = Preprocessing(size=(640, 640), resize="letterbox", interpolation="bilinear")


def _fit(pre: Preprocessing = LETTERBOX) -> media.Fit:
    return media.Fit(lambda w, h: pre.decode_size((h, w)), pre.interpolation)


def test_the_chains_that_scale_for_a_jetson_and_for_a_pc():
    chain, _ = media.decode_chain("H264", JETSON, fit=_fit())
    # the VIC scales and converts in one pass; its caps get the size once the decoder says its own
    assert chain == (
        "rtph264depay ! h264parse ! nvv4l2decoder ! nvvidconv name=scale "
        "interpolation-method=1 ! capsfilter name=fit caps=video/x-raw,format=BGRx"
    )
    chain, _ = media.decode_chain("H264", PC, fit=_fit())
    # scaled before the colour conversion: videoconvert converts the model's pixels
    assert chain == (
        "rtph264depay ! h264parse ! avdec_h264 thread-type=slice ! videoscale name=scale "
        "method=1 ! capsfilter name=fit caps=video/x-raw ! videoconvert ! "
        "capsfilter caps=video/x-raw,format=BGR"
    )
    area = Preprocessing(size=(224, 224), resize="stretch", interpolation="area")
    assert "method=4" in media.file_pipeline("a.mp4", PC, _fit(area)).rest
    assert "interpolation-method=4" in media.file_pipeline("a.mp4", JETSON, _fit(area)).rest
    # no fit, or no videoscale on the machine: the chains as before
    assert "scale" not in media.decode_chain("H264", PC)[0]
    assert "scale" not in media.decode_chain("H264", PC - {"videoscale"}, fit=_fit())[0]


VIEW = {"tee", "queue"}


def test_the_web_viewers_branch_for_a_jetson_and_for_a_pc():
    """With a demand (the web viewer), the decoded frames are split: the model's branch scaled
    as without one, and the full-picture branch (a queue named ``view`` whose input the
    connection thins by PTS) converted into an appsink that never holds the decoder back
    (leaky queue, one buffer, no preroll)."""
    fit = media.Fit(_fit().size, "bilinear", media.Demand(5))
    chain, _ = media.decode_chain("H264", JETSON | VIEW, fit=fit)
    assert chain == (
        "rtph264depay ! h264parse ! nvv4l2decoder ! tee name=split ! queue max-size-buffers=2 ! "
        "nvvidconv name=scale interpolation-method=1 ! capsfilter name=fit "
        "caps=video/x-raw,format=BGRx split. ! queue name=view leaky=downstream "
        "max-size-buffers=1 ! nvvidconv ! capsfilter caps=video/x-raw,format=BGRx ! "
        "appsink name=full sync=false async=false max-buffers=1 drop=true emit-signals=true"
    )
    chain, _ = media.decode_chain("H264", PC | VIEW, fit=fit)
    assert chain.startswith(
        "rtph264depay ! h264parse ! avdec_h264 thread-type=slice ! tee name=split ! "
        "queue max-size-buffers=2 ! videoscale name=scale"
    )
    assert "max-size-buffers=1 ! videoconvert ! " in chain
    # a file: the appsink of the model's frames ends the first branch, the viewer's follows
    rest = media.file_pipeline("a.mp4", PC | VIEW, fit).rest
    main, view = rest.split(" split. ! ")
    assert main.endswith("appsink name=sink sync=false max-buffers=4 drop=false")
    assert view.endswith(
        "appsink name=full sync=false async=false max-buffers=1 drop=true emit-signals=true"
    )
    # no demand, or a GStreamer without the branch's elements: no split
    assert "split" not in media.decode_chain("H264", PC | VIEW, fit=_fit())[0]
    assert "split" not in media.decode_chain("H264", PC, fit=fit)[0]


def test_cameras_on_the_board_scale_on_the_way():
    """A CSI sensor's NVMM frames are scaled by the same VIC pass that converts them; a V4L2
    camera's by videoscale before the conversion on a PC, nvvidconv on a Jetson. Without a fit
    their pipelines are as before (full frames)."""
    csi = media.csi_pipeline(0, 1920, 1080, 30, _fit(), {"nvarguscamerasrc"})
    assert csi.rest == (
        'capsfilter name=head caps="video/x-raw(memory:NVMM),width=1920,height=1080,'
        'framerate=30/1" ! nvvidconv name=scale interpolation-method=1 ! capsfilter name=fit '
        "caps=video/x-raw,format=BGRx ! appsink name=sink sync=false max-buffers=2 drop=true"
    )
    assert media.csi_pipeline(0, 1920, 1080, 30).rest == (
        'capsfilter name=head caps="video/x-raw(memory:NVMM),width=1920,height=1080,'
        'framerate=30/1" ! nvvidconv ! capsfilter caps=video/x-raw,format=BGRx ! '
        "appsink name=sink sync=false max-buffers=2 drop=true"
    )
    usb = media.v4l2_pipeline("/dev/video0", 1280, 720, 30, "yuyv", _fit(), PC)
    assert usb.rest == (
        "capsfilter name=head caps=video/x-raw,format=YUY2,width=1280,height=720,"
        "framerate=30/1 ! videoscale name=scale method=1 ! capsfilter name=fit caps=video/x-raw "
        "! videoconvert ! capsfilter caps=video/x-raw,format=BGR ! appsink name=sink "
        "sync=false max-buffers=2 drop=true"
    )
    mjpeg = media.v4l2_pipeline("/dev/video0", 0, 0, 0, "mjpeg", _fit(), JETSON)
    assert mjpeg.rest.startswith(
        "capsfilter name=head caps=image/jpeg ! jpegdec ! nvvidconv name=scale"
    )
    assert "scale" not in media.v4l2_pipeline("/dev/video0", 1280, 720, 30, "yuyv").rest


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
        (["jsonl://a.jsonl", "http://127.0.0.1:8080"], "off", "auto", None),  # on demand
        (["http://127.0.0.1:8080", "file://out.mp4"], "off", "auto", "file:// shows or keeps"),
        (["snapshots://shots"], "off", "auto", "snapshots:// shows or keeps"),
        (["events://e.jsonl"], "motion", "auto", None),  # motion on the scaled frames
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
        # the web viewer: full frames while one of its streams is watched, and only then
        assert (opts.fit.demand is not None) == any(u.startswith("http") for u in sinks)
    # a bare model (no bundle) or a model that takes frames as they are: nothing to scale to
    assert decoder_fit(SourceOptions(), sinks, GateOptions(), None)[0].fit is None


def test_with_the_motion_gate_frames_are_scaled_only_down_to_its_working_picture(bundles, tmp_path):
    """The motion gate finds motion in a picture 320 pixels wide (at most): the decoder scales
    for it only where the model's size is at least that (a 128x96 model's frames come whole)."""
    gate = GateOptions(mode="motion")
    wide = decoder_fit(SourceOptions(), [], gate, Bundle(bundles["stretch"]))[0].fit
    assert wide.size(1280, 720) == (640, 360)
    small = blob_detector_bundle(tmp_path / "small", 96, 128, "stretch")
    tiny = decoder_fit(SourceOptions(), [], gate, Bundle(small))[0].fit
    assert tiny.size(1280, 720) is None
    assert decoder_fit(SourceOptions(), [], GateOptions(), Bundle(small))[0].fit.size(
        1280, 720
    ) == (128, 96)


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
    if not media.available()[0]:
        return False
    Gst = media.gst()
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
    keep = media.Fit(lambda w, h: None)
    conn = media.GstConnection(
        media.file_pipeline(str(video), media.elements(), keep),
        False,
        media.elements(),
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
            "camera",
            bundles[resize],
            "--source",
            video,
            "--decoder",
            "gstreamer",
            "--decoder-scale",
            scale,
            "--jsonl",
            out,
            "--headless",
        )
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


def _watch(url: str, got: list, stop: threading.Event) -> None:
    """Pictures of an MJPEG stream, decoded into ``got``, until ``stop``; then the connection
    closes."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        buf = b""
        while not stop.is_set():
            buf += r.read1(65536)
            while b"\r\n\r\n" in buf:
                head, rest = buf.split(b"\r\n\r\n", 1)
                size = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                if len(rest) < size:
                    break
                got.append(cv2.imdecode(np.frombuffer(rest[:size], np.uint8), cv2.IMREAD_COLOR))
                buf = rest[size:]


@needs_gst
@pytest.mark.subprocess
def test_the_web_viewer_gets_full_pictures_only_while_watched_and_at_its_rate(bundles, tmp_path):
    """The model's frames are scaled in the decoder whether the web viewer is watched or not; a
    viewer that connects gets the camera's full pictures (the box drawn in its pixels) from the
    full-picture branch, at the viewer's rate (?fps=5 on a 30 fps file: about one frame in
    six); once it leaves, the branch gives none. Counted by the run's own statistics."""
    import re
    import subprocess
    import sys
    import time
    import urllib.request

    video = _scene(tmp_path / "scene.mp4", 30)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(bundles["stretch"]),
            "--source",
            str(video),
            "--decoder",
            "gstreamer",
            "--loop",
            "--duration",
            "60",
            "--output",
            "http://127.0.0.1:0?fps=5",
            "--headless",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        url = None
        while url is None:
            line = proc.stdout.readline()
            assert line, (lines, proc.stderr.read())
            lines.append(line)
            found = re.search(r"web viewer: (http://\S+/)", line)
            url = found.group(1) if found else None
        said = "".join(lines)

        def stream() -> dict:
            with urllib.request.urlopen(url + "stats.json", timeout=10) as r:
                return (json.loads(r.read()).get("streams") or [{}])[0]  # {}: not running yet

        def after(more: int) -> dict:
            first = stream()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                now = stream()
                if now.get("frames_captured", 0) >= first.get("frames_captured", 0) + more:
                    return now
                time.sleep(0.1)
            raise AssertionError("the run stopped taking frames")

        s0 = after(20)
        assert s0["frames_scaled"] == s0["frames_captured"], s0  # nobody watches: all scaled
        assert "frames_viewed" not in s0, s0  # and the branch converts nothing
        pictures: list = []
        stop = threading.Event()
        viewer = threading.Thread(target=_watch, args=(url + "stream.mjpg", pictures, stop))
        viewer.start()
        try:
            s1 = after(90)  # the statistics the page shows are refreshed twice a second
        finally:
            stop.set()
            viewer.join(timeout=30)
        assert len(pictures) >= 5, len(pictures)
        assert all(p.shape == (720, 1280, 3) for p in pictures), [p.shape for p in pictures]
        # the square's box drawn in the camera's pixels: green around a bright 48-pixel square
        green = [(p[:, :, 1] > 150) & (p[:, :, 0] < 100) & (p[:, :, 2] < 100) for p in pictures]
        assert sum(g.sum() > 100 for g in green) >= len(pictures) // 2, [g.sum() for g in green]
        assert s1["frames_scaled"] == s1["frames_captured"], s1  # the model's frames: scaled
        viewed = s1["frames_viewed"]
        watched = s1["frames_captured"] - s0["frames_captured"]
        assert 8 <= viewed <= watched / 6 + 8, (viewed, watched)  # at the viewer's rate
        time.sleep(1.0)
        s2 = after(60)  # gone: the branch gives nothing
        assert s2["frames_viewed"] <= viewed + 10, (s1, s2)
        assert s2["frames_scaled"] == s2["frames_captured"], s2
        assert "pictures at up to 5 fps while the web viewer is watched" in said, said
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@needs_gst
def test_a_looped_file_keeps_every_frame_when_a_viewer_leaves_at_its_end_and_comes_back(tmp_path):
    """A viewer watching as a looped file ends (the picture branch's appsink got the end of the
    stream) leaves during the last buffered frames (the valve closes), and comes back in the
    next loop: that loop still gives every frame to the model (a closed valve dropped the
    rewind's flush, and the branch's appsink, still at its end, then stopped the decoder), its
    pictures reach the frames again, and the end-of-stream the bus said before the rewind does
    not end the next loop."""
    import time

    video = _scene(tmp_path / "loop.mp4", 30)
    demand = media.Demand(10)
    demand.hold(0)
    fit = media.Fit(lambda w, h: (320, 180), "bilinear", demand)
    source = GstFileSource(str(video), loop=True, fit=fit)
    loops: list[list] = [[]]
    last = None
    try:
        while len(loops) < 3 and sum(map(len, loops)) < 200:
            got = source.read()
            assert got is not None, [len(x) for x in loops]
            t = source.conn.media_time
            if last is not None and t < last:
                loops.append([])
            last = t
            loops[-1].append(source.view is not None)
            if len(loops) == 1 and len(loops[0]) == 26 and demand.wanted(0):
                time.sleep(0.5)  # the decoder reaches the end; so does the picture branch
                demand.release(0)  # the viewer leaves: the valve closes with the next frames
            if len(loops) == 2 and len(loops[1]) == 5:
                demand.hold(0)  # and comes back
    finally:
        source.close()
    assert [len(x) for x in loops[:2]] == [30, 30], [len(x) for x in loops]
    assert sum(loops[1]) >= 1 and any(loops[0][:26]), loops  # pictures before and after


@needs_gst
def test_the_end_a_file_said_before_its_rewind_does_not_end_the_next_loop(tmp_path):
    """At a file's end the bus says end-of-stream and the connection keeps it; after a rewind
    that end is over (kept, the next loop ended at its first frame slower than 100 ms)."""
    video = _scene(tmp_path / "end.mp4", 12)
    have = media.elements()
    conn = media.GstConnection(
        media.file_pipeline(str(video), have), False, have, 30.0, threading.Event()
    )
    try:
        n = 1
        while conn.read(30.0, threading.Event()) is not None:
            n += 1
        assert n == 12
        assert conn.rewind()
        assert conn._bus_problem() is None
        assert conn.read(30.0, threading.Event()) is not None
    finally:
        conn.close()


@needs_gst
def test_the_picture_branch_keeps_the_viewers_rate_when_a_viewer_comes_back_later(tmp_path):
    """The branch gives a picture each 1/fps of the stream's time from the moment a viewer
    comes: at fps=5 on a 30 fps file, about one frame in six, whether it is the first viewer
    or one that comes back two seconds later (videorate counted from the stream's start, and
    let every frame through until it caught up with the time the viewer came)."""
    video = _scene(tmp_path / "long.mp4", 120)
    demand = media.Demand(5)
    fit = media.Fit(lambda w, h: (320, 180), "bilinear", demand)
    source = GstFileSource(str(video), fit=fit)
    got: list = []
    try:
        while True:
            n = len(got)
            if n in (0, 75):
                demand.hold(0)
            if n in (30, 105):
                demand.release(0)
            if source.read() is None:
                break
            got.append(source.view is not None)
    finally:
        source.close()
    assert len(got) == 120
    first, back = sum(got[:30]), sum(got[75:105])
    assert 3 <= first <= 7 and 3 <= back <= 7, (first, back, got)
    assert not any(got[40:75]) and not any(got[110:]), got  # nobody watching: no picture
