"""The folders edgert writes clips and snapshots into (issue 46): a folder may be a user's own, be
shared by two runs, hold a killed run's clip, or be given a busy scene. Retention removes only
what edgert recorded as its own (real files, links and folders on disk; the record in
``DIR/.edgert``), names never collide across runs (two real camera processes on one folder), a
killed run's ``.part`` is finished by the next run (a real kill, ffprobe), a busy scene's clips are
split and kept to the budget while they are written, the ring of a camera with rare key frames
stays bounded, and a stream that changes size mid-stream gives one size per file (a real RTSP
server, Debian's GStreamer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cv2
import pytest

from edgert.apps.camera.sinks.retention import Ledger, complete_mp4_length
from tests.apps.test_gate import _run, quiet_scene
from tests.conftest import ROOT, assert_user_error, run_cli
from tests.procs import SCENE, edgert, rss_mb
from tests.tiny import blob_detector_bundle

pytestmark = pytest.mark.gst


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("folders")
    return blob_detector_bundle(folder / "det"), quiet_scene(folder / "scene.mp4")


@pytest.mark.subprocess
def test_each_track_leaves_its_best_picture_and_its_end_event_says_where(scene, tmp_path):
    """--snapshots DIR: one picture per track when it ends (the frame where the detector was
    surest, its box drawn), the track_end event naming the file; with ?crop=1 the crop too."""
    bundle, video = scene
    (tmp_path / "run").mkdir()
    shots = tmp_path / "shots"
    summary = _run(bundle, video, tmp_path / "run", "--output", f"snapshots://{shots}?crop=1")
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    ends = [e for e in events if e["event"] == "track_end"]
    assert len(ends) == 2 and all("snapshot" in e and "snapshot_crop" in e for e in ends), ends
    for e in ends:
        picture = cv2.imread(e["snapshot"])
        crop = cv2.imread(e["snapshot_crop"])
        assert picture.shape == (240, 320, 3)  # the whole frame
        assert 10 < crop.shape[0] < 120 and 10 < crop.shape[1] < 120  # the object's box
        green = (picture[..., 1] > 200) & (picture[..., 0] < 80) & (picture[..., 2] < 80)
        assert green.sum() > 40  # the box is drawn
    assert sorted(p.name for p in shots.glob("*.jpg")) == sorted(
        [Path(e["snapshot"]).name for e in ends] + [Path(e["snapshot_crop"]).name for e in ends]
    )
    report = next(o for o in summary["outputs"] if isinstance(o, dict) and "snapshots" in o)
    assert report["written"] == 2
    assert_user_error(
        run_cli("camera", bundle, "--source", video, "--output", "snapshots://x?zoom=2"),
        "unknown option",
    )
    assert_user_error(  # the last one used to win silently (fault battery 6, G22's kind)
        run_cli("camera", bundle, "--source", video, "--clips", "clips://x?bitrate=1&bitrate=2"),
        "bitrate= is given twice",
    )


def _probe(path) -> dict:
    """ffprobe (Debian's ffmpeg): the first packet's flags, the duration, the frames decoded."""
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-count_frames",
            "-show_entries",
            "stream=nb_read_frames:format=duration",
            "-of",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    info = json.loads(out)
    first = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-show_entries",
            "packet=flags",
            "-of",
            "csv=p=0",
            "-read_intervals",
            "%+#1",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        "key_first": first[0].startswith("K"),
        "duration": float(info["format"]["duration"]),
        "frames": int(info["streams"][0]["nb_read_frames"]),
    }


def _can_clip() -> bool:
    from edgert.apps.camera import media

    if shutil.which("ffprobe") is None or not media.available()[0]:
        return False
    Gst = media.gst()
    return all(Gst.ElementFactory.find(e) is not None for e in ("x264enc", "mp4mux", "appsrc"))


needs_clips = pytest.mark.skipif(
    not _can_clip(),
    reason="GStreamer (python3-gi) with x264enc and mp4mux, and ffprobe (Debian's ffmpeg) are "
    "needed; .ci/run installs them (the oldest-dependency venv has no GStreamer: skipped there)",
)


@pytest.mark.subprocess
@needs_clips
def test_clips_start_on_a_key_frame_with_the_pre_roll_and_merge_events(scene, tmp_path):
    """--clips DIR?pre=2&post=2: the two crossings of the scene (each a track start, then a line
    crossing 1.8 s later) give two clips, each from a key frame at least 2 s before its first
    event to 2 s after its last (the video's end cuts the second), decodable to the end; every
    event names its clip; a tiny max_gb keeps only the newest."""
    bundle, video = scene
    (tmp_path / "run").mkdir()
    clips = tmp_path / "clips"
    _run(bundle, video, tmp_path / "run", "--clips", f"{clips}?pre=2&post=2")
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    named = [e for e in events if e["event"] in ("track_start", "line_cross")]
    assert named and all("clip" in e for e in named), named
    by_clip: dict = {}
    for e in named:
        by_clip.setdefault(e["clip"], []).append(e["t_video"])
    assert len(by_clip) == 2 and sorted(p.name for p in clips.glob("*.mp4*")) == sorted(
        Path(p).name for p in by_clip
    )
    for path, times in by_clip.items():
        p = _probe(path)
        start = max(0.0, min(times) - 2.0)
        expected = min(max(times) + 2.0, 19.9) - start
        assert p["key_first"], path
        assert abs(p["duration"] - expected) <= 1.0 + 0.15, (path, p, times)  # a key frame a second
        assert abs(p["frames"] - p["duration"] * 10) <= 1, p  # every frame decodes
    # retention: over max_gb the oldest go first, the newest stays
    (tmp_path / "kept").mkdir()
    small = tmp_path / "small"
    summary = _run(  # the flags' way: --pre-roll, --post-roll, --clips-max-gb
        bundle,
        video,
        tmp_path / "kept",
        *("--clips", small, "--pre-roll", "2", "--post-roll", "2", "--clips-max-gb", "0.00002"),
    )
    left = sorted(small.glob("*.mp4"))
    report = next(o for o in summary["outputs"] if isinstance(o, dict) and "clips" in o)
    # 20 kB: each clip goes on in a new file at its key frames once it holds a quarter of that
    assert report["written"] >= 2 and report["deleted"] == report["written"] - 1, report
    assert len(left) == 1 and int(left[0].name.split("_")[2]) >= 16000, left  # the newest


@pytest.mark.subprocess
@needs_clips
def test_a_clip_being_written_when_the_process_is_killed_still_plays(scene, tmp_path):
    bundle, video = scene
    clips = tmp_path / "clips"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgert.apps",
            "camera",
            str(bundle),
            "--source",
            video,
            "--loop",
            "--headless",
            "--conf",
            "0.75",
            "--clips",
            f"{clips}?post=600",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(clips.glob("*.part")):
        time.sleep(0.2)
    time.sleep(3.0)  # seconds of video (read faster than real time): fragments written
    proc.kill()
    proc.wait(30)
    parts = list(clips.glob("*.mp4.part"))
    assert len(parts) == 1 and not list(clips.glob("*.mp4")), list(clips.iterdir())
    p = _probe(parts[0])
    assert p["key_first"] and p["frames"] >= 10, p  # what was written up to then plays


def _limited(limit: int):
    import resource

    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail: EFBIG

    return apply


@pytest.mark.subprocess
@needs_clips
@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_disk_that_fills_during_a_clip(scene, tmp_path, policy):
    """The file-size limit makes the clip's writes fail mid-clip, as a full disk does: one
    sentence; `stop` ends the run (summary printed), `continue` processes every frame without
    clips; either way no clip is left under a complete name, nor a broken .part."""
    bundle, video = scene
    clips = tmp_path / "clips"
    cmd = edgert(
        *("camera", bundle, "--source", video, "--headless", "--conf", "0.75", "--json"),
        *("--clips", f"{clips}?bitrate=8000", "--pre-roll", "2", "--on-output-error", policy),
        *("--store", "none"),  # the clip's writes fail, not the store's beside it (issue 69)
    )
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=180, preexec_fn=_limited(20_000)
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    if policy == "continue":  # said when it happens, and again as the run's outcome
        assert "going on without that output" in err.pop(0), err
    assert len(err) == 1 and "clips: cannot" in err[0] and "file too large" in err[0], err
    summary = json.loads(proc.stdout)
    assert "clips: cannot" in summary["output_errors"][0]
    if policy == "continue":
        assert summary["frames_processed"] == 200  # the whole scene
    else:
        assert summary["frames_processed"] < 200
    assert list(clips.glob("*.mp4*")) == []


@pytest.mark.subprocess
def test_a_camera_left_out_of_the_clips_and_another_out_of_the_snapshots(scene, tmp_path):
    """Two cameras on one footage, --stream-clips 1:off and --stream-snapshots 0:off (a site
    file's clips: false / snapshots: false): clips of camera 0 only (camera 1 keeps no ring),
    pictures of camera 1's tracks only; each event names what its camera kept."""
    bundle, video = scene
    clips, shots, ev = tmp_path / "clips", tmp_path / "shots", tmp_path / "events.jsonl"
    proc = run_cli(
        *("camera", bundle, "--source", video, "--source", video, "--headless", "--json"),
        *("--conf", "0.75", "--line", "door=160,0,160,240", "--events", ev),
        *("--clips", clips, "--pre-roll", "2", "--post-roll", "2", "--stream-clips", "1:off"),
        *("--snapshots", shots, "--stream-snapshots", "0:off"),
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in ev.read_text().splitlines()]
    crossings = [e for e in events if e["event"] == "line_cross"]
    assert {e["stream"] for e in crossings} == {0, 1}
    assert all(("clip" in e) == (e["stream"] == 0) for e in crossings), crossings
    ends = [e for e in events if e["event"] == "track_end"]
    assert {e["stream"] for e in ends} == {0, 1}
    assert all(("snapshot" in e) == (e["stream"] == 1) for e in ends), ends
    assert clips.glob("*.mp4") and all("_s0_" in p.name for p in clips.glob("*.mp4*"))
    assert list(shots.glob("*.jpg")) and all("_s1_" in p.name for p in shots.glob("*.jpg"))
    report = next(o for o in json.loads(proc.stdout)["outputs"] if "clips" in o)
    assert report["video"][1] is None and report["video"][0] is not None
    base = ("camera", bundle, "--source", video, "--headless")
    assert_user_error(
        run_cli(*base, "--clips", clips, "--stream-clips", "1:off"), "there is no stream 1"
    )
    assert_user_error(run_cli(*base, "--clips", clips, "--stream-clips", "0:no"), "STREAM:off")
    assert_user_error(run_cli(*base, "--stream-snapshots", "0:off"), "apply to --snapshots DIR")


@pytest.mark.subprocess
def test_retention_flags_say_what_they_need(scene, tmp_path):
    bundle, video = scene
    proc = run_cli("camera", bundle, "--source", video, "--headless", "--pre-roll", "3")
    assert_user_error(proc, "--pre-roll apply to --clips DIR")
    proc = run_cli("camera", bundle, "--source", video, "--headless", "--keep-days", "2")
    assert_user_error(proc, "--clips DIR or --snapshots DIR")
    proc = run_cli(
        "camera", bundle, "--source", video, "--headless", "--clips", tmp_path, "--keep-days", "0"
    )
    assert_user_error(proc, "above 0")


@pytest.mark.subprocess
@needs_clips
def test_memory_stays_flat_over_a_run_that_writes_a_clip_every_second_or_so(scene, tmp_path):
    """The scene looped (a crossing every few seconds of scene time, read faster than real time):
    tens of clips in a minute, each its own muxer pipeline. The process's RSS after the first
    20 s stays within 15 MB of where it was (a leak of a muxer, a ring or a buffer per clip would
    grow by more than that). benchmarks/clips.py measures three minutes."""
    bundle, video = scene
    clips = tmp_path / "clips"
    proc = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", video, "--loop", "--headless", *SCENE),
            *("--clips", clips, "--pre-roll", "2", "--post-roll", "2", "--duration", "60"),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    series = []
    t0 = time.monotonic()
    while proc.poll() is None:
        try:
            series.append((time.monotonic() - t0, rss_mb(proc.pid)))
        except (OSError, StopIteration):
            break
        time.sleep(1.0)
    assert proc.wait(30) == 0, proc.stderr.read()
    written = len(list(clips.glob("*.mp4")))
    settled = [mb for t, mb in series if 20 <= t <= 25]
    later = [mb for t, mb in series if t > 25]
    assert written >= 20 and settled and later, (written, series)
    assert max(later) - max(settled) < 15, series


def _age(path: Path, days: float) -> None:
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)


def _users_files(folder: Path, outside: Path) -> dict:
    """A user's own things in ``folder``: videos, a hidden one, a link to a file elsewhere, a
    folder named like a clip, all older than anything edgert writes. name -> bytes (None: dir)."""
    folder.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "precious.mp4").write_bytes(b"precious")
    mine = {"family_2019.mp4": b"f" * 5000, "wedding.mp4": b"w" * 7000, ".hidden.mp4": b"h"}
    for name, data in mine.items():
        (folder / name).write_bytes(data)
        _age(folder / name, 2000)
    (folder / "link.mp4").symlink_to(outside / "precious.mp4")
    (folder / "dir.mp4").mkdir()
    (folder / "dir.mp4" / "inside.mp4").write_bytes(b"i")
    for name in ("link.mp4", "dir.mp4"):
        _age(folder / name, 2000)
    return {**mine, "link.mp4": b"precious", "dir.mp4": None}


def _still_there(folder: Path, mine: dict, outside: Path) -> None:
    for name, data in mine.items():
        if data is None:
            assert (folder / name / "inside.mp4").read_bytes() == b"i"
        else:
            assert (folder / name).read_bytes() == data, name
    assert (folder / "link.mp4").is_symlink() and (outside / "precious.mp4").exists()


def test_retention_removes_only_the_files_edgert_recorded(tmp_path):
    folder, outside = tmp_path / "videos", tmp_path / "elsewhere"
    mine = _users_files(folder, outside)
    ledger = Ledger(folder, "clips")
    ours = [ledger.write_new(f"2020010{i}-000000_s0_{i}", ".mp4", b"x" * 1000) for i in range(4)]
    for i, p in enumerate(ours):
        _age(p, 10 - i)
    # one of edgert's names now holds a user's file (put there since): not edgert's any more
    replaced = ours[1]
    tmp = folder / "mine.tmp"
    tmp.write_bytes(b"user" * 250)  # the same size, another file
    os.replace(tmp, replaced)
    _age(replaced, 9)
    assert [p.name for p in ledger.retain(keep_days=8.5)] == [ours[0].name]
    assert ledger.retain(max_gb=1e-12) == [ours[2]]  # the newest (ours[3]) stays
    assert replaced.read_bytes() == b"user" * 250 and ours[3].exists()
    _still_there(folder, mine, outside)
    # a record that names a file outside the folder, or a crafted identity, removes nothing
    with open(folder / ".edgert" / "files.jsonl", "a") as f:
        st = os.lstat(outside / "precious.mp4")
        f.write(json.dumps({"name": "../elsewhere/precious.mp4", "id": [st.st_dev, st.st_ino]}))
        f.write("\n" + json.dumps({"name": "wedding.mp4", "id": [1, 2, 7000]}) + "\n")
    assert ledger.retain(max_gb=1e-12) == []
    _still_there(folder, mine, outside)
    ledger.close()


def test_names_are_taken_exclusively_and_never_overwrite(tmp_path):
    a, b = Ledger(tmp_path, "snapshots"), Ledger(tmp_path, "snapshots")
    assert a.run != b.run
    pa = a.write_new("20261203-083847_s0_track1", ".jpg", b"a")
    pb = b.write_new("20261203-083847_s0_track1", ".jpg", b"b")
    assert pa != pb and pa.read_bytes() == b"a" and pb.read_bytes() == b"b"
    # a name already taken (by anything) is never written over: the next one is used
    taken = tmp_path / f"20261203-083847_s0_track2_{a.run}.jpg"
    taken.write_bytes(b"someone's")
    p2 = a.write_new("20261203-083847_s0_track2", ".jpg", b"new")
    assert taken.read_bytes() == b"someone's" and p2.name.endswith("-2.jpg")
    part = a.new_part("20261203-083847_s0_100", ".mp4")
    assert part.with_name(part.name + ".part").exists() and not part.exists()
    a.close()
    b.close()


def _box(kind: bytes, size: int) -> bytes:
    return size.to_bytes(4, "big") + kind + b"\0" * (size - 8)


_DIES_MID_CLIP = """
import os, sys
from edgert.apps.camera.sinks.retention import Ledger
ledger = Ledger(sys.argv[1], "clips")
path = ledger.new_part("20261203-090000_s0_5000", ".mp4")
with open(str(path) + ".part", "wb") as f:
    f.write(bytes.fromhex(sys.argv[2]))
print(path, flush=True)
os._exit(9)
"""


def _killed_mid_clip(folder: Path, data: bytes) -> Path:
    """The clip a process wrote ``data`` of into ``folder``'s ledger, then was killed (its
    ``.part`` left beside the name the ledger took)."""
    proc = subprocess.run(
        [sys.executable, "-c", _DIES_MID_CLIP, str(folder), data.hex()],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert proc.returncode == 9, proc.stderr
    return Path(proc.stdout.strip())


@pytest.mark.subprocess
@pytest.mark.parametrize("written", ["nothing", "header only", "a fragment cut short"])
def test_a_dead_runs_part_with_no_whole_fragment_is_removed_not_left(tmp_path, written):
    """A run killed before its clip's first whole fragment leaves a part no one can finish
    (benchmarks/store_kill.py --camera: 8 of 20 in 46 kills): the ledger says it was edgert's,
    so the next run removes it (it was left on the disk, unknown to every later run, and its
    store rows never marked gone)."""
    folder = tmp_path / "clips"
    folder.mkdir()
    head = _box(b"ftyp", 24) + _box(b"moov", 100)
    data = {"nothing": b"", "header only": head}.get(written, head + _box(b"moof", 40)[:30])
    left = _killed_mid_clip(folder, data)
    part = left.with_name(left.name + ".part")
    assert part.exists() and not left.exists()
    nxt = Ledger(folder, "clips")
    nxt.retain()
    assert not part.exists() and not left.exists(), sorted(p.name for p in folder.iterdir())
    assert nxt.recovered == [] and nxt.discarded == [str(part)]
    nxt.close()


@pytest.mark.subprocess
def test_a_live_runs_clip_counts_against_the_budget_and_a_dead_runs_is_finished(tmp_path):
    folder = tmp_path / "clips"
    folder.mkdir()
    older = Ledger(folder, "clips")
    done = [older.write_new(f"2020010{i}-000000_s0_1", ".mp4", b"x" * 4000) for i in range(3)]
    for i, p in enumerate(done):
        _age(p, 5 - i)
    live = Ledger(folder, "clips")
    writing = live.new_part("20261203-080000_s0_1", ".mp4")
    writing.with_name(writing.name + ".part").write_bytes(b"p" * 9000)
    # 12 kB finished + 9 kB being written, a budget of 10 kB: the finished go, oldest first,
    # the newest too (a clip is being written); the part is never touched
    assert older.retain(max_gb=10e-6) == done
    assert writing.with_name(writing.name + ".part").stat().st_size == 9000
    live.close()
    older.close()
    # a run killed while writing: a fragmented MP4 whose last fragment was cut short
    whole = _box(b"ftyp", 24) + _box(b"moov", 100) + _box(b"moof", 40) + _box(b"mdat", 300)
    cut = whole + _box(b"moof", 40) + _box(b"mdat", 300)[:120]
    left = _killed_mid_clip(folder, cut)
    assert not left.exists() and left.with_name(left.name + ".part").exists()
    nxt = Ledger(folder, "clips")
    nxt.retain()
    assert nxt.recovered == [str(left)] and left.read_bytes() == whole
    assert not left.with_name(left.name + ".part").exists()
    assert nxt.retain(max_gb=1e-12) == [] and left.exists()  # now a finished clip, the newest
    nxt.close()
    with open(left, "rb") as f:
        assert complete_mp4_length(f.fileno(), len(whole)) == len(whole)


@pytest.mark.subprocess
def test_two_runs_sharing_a_snapshots_folder_keep_every_picture(scene, tmp_path):
    """Two camera processes started together on one --snapshots folder (the review's case: both
    named their first track's picture alike and one overwrote the other)."""
    bundle, video = scene
    shared = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            edgert(
                *("camera", bundle, "--source", video, "--headless", *SCENE),
                *("--snapshots", f"{shared}?crop=1", "--events", tmp_path / f"e{i}.jsonl"),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    named = []
    for i in range(2):
        for line in (tmp_path / f"e{i}.jsonl").read_text().splitlines():
            e = json.loads(line)
            named += [e[k] for k in ("snapshot", "snapshot_crop") if k in e]
    assert len(named) == 8 and len(set(named)) == 8, named  # 2 tracks x 2 runs x (picture, crop)
    files = sorted(p for p in shared.iterdir() if p.is_file())
    assert sorted(map(str, files)) == sorted(named)


@pytest.mark.subprocess
def test_user_files_in_the_clips_and_snapshots_folders_survive_retention(scene, tmp_path):
    """The review's repro: a user's videos, a hidden one, a link and a folder named dir.mp4 in
    the clips folder under a tiny --clips-max-gb; a user's old photos under --keep-days."""
    bundle, video = scene
    folder, outside = tmp_path / "ret", tmp_path / "outside"
    mine = _users_files(folder, outside)
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("holiday1.jpg", "passport.jpg"):
        (photos / name).write_bytes(name.encode())
        _age(photos / name, 2000)
    proc = run_cli(
        *("camera", bundle, "--source", video, "--headless", "--json", *SCENE),
        *("--clips", folder, "--pre-roll", "2", "--post-roll", "2", "--clips-max-gb", "0.000001"),
        *("--snapshots", photos, "--keep-days", "30"),
    )
    assert proc.returncode == 0, proc.stderr
    _still_there(folder, mine, outside)
    assert {"holiday1.jpg", "passport.jpg"} <= {p.name for p in photos.glob("*.jpg")}
    report = {k: o for o in json.loads(proc.stdout)["outputs"] if isinstance(o, dict) for k in o}
    clips = report["clips"]
    # a budget of 1 kB: each clip splits at its key frames (a quarter of the budget reached);
    # retention removed edgert's own clips alone, all but the newest
    assert clips["written"] >= 2 and clips["deleted"] == clips["written"] - 1, clips
    assert report["snapshots"]["deleted"] == 0
    assert len([p for p in folder.glob("*_s0_*.mp4")]) == 1


@pytest.mark.subprocess
@needs_clips
def test_a_clip_a_killed_run_left_is_finished_by_the_next_run(scene, tmp_path):
    bundle, video = scene
    clips = tmp_path / "clips"
    events = tmp_path / "events.jsonl"
    proc = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", video, "--loop", "--headless", "--conf", "0.75"),
            *("--clips", f"{clips}?post=600", "--events", events),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(clips.glob("*.part")):
        time.sleep(0.2)
    time.sleep(3.0)
    proc.kill()
    proc.wait(30)
    (part,) = clips.glob("*.mp4.part")
    named = {json.loads(x).get("clip") for x in events.read_text().splitlines()} - {None}
    assert named == {str(part)[: -len(".part")]}, named
    again = run_cli(
        *("camera", bundle, "--source", video, "--headless", "--conf", "0.99"),
        *("--clips", clips),
    )
    assert again.returncode == 0, again.stderr
    finished = sorted(named)[0]
    assert f"finished 1 clip(s) that a run left unfinished (killed while writing): {finished}" in (
        again.stdout
    ), again.stdout
    assert not list(clips.glob("*.part")) and Path(finished).exists()
    p = _probe(finished)
    assert p["key_first"] and p["frames"] >= 10, p
    # now a clip like any other: retention may remove it (a later run's tiny budget)
    third = run_cli(
        *("camera", bundle, "--source", video, "--headless", "--json", *SCENE),
        *("--clips", clips, "--clips-max-gb", "0.000001", "--pre-roll", "1", "--post-roll", "1"),
    )
    report = next(o for o in json.loads(third.stdout)["outputs"] if "clips" in o)
    assert "recovered" not in report and report["deleted"] == report["written"], report
    assert not Path(finished).exists()


@pytest.mark.subprocess
@needs_clips
def test_a_busy_scene_is_split_into_clips_that_keep_to_the_budget(scene, tmp_path):
    """Events all the time (the synthetic scene at a low threshold): the clip is split at
    max_s and at a quarter of max_gb, and the folder, clips being written included, stays
    within the budget while the run goes on (the review's case grew one 98 MB file)."""
    bundle, _ = scene
    clips = tmp_path / "clips"
    budget = 4e6
    proc = subprocess.Popen(
        edgert(
            *("camera", bundle, "--source", "synthetic://", "--width", "640", "--height", "480"),
            *("--headless", "--conf", "0.3", "--duration", "14", "--json"),
            *("--clips", f"{clips}?bitrate=12000&max_s=4", "--clips-max-gb", str(budget / 1e9)),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    most = 0
    while proc.poll() is None:
        with_parts = sum(p.stat().st_size for p in clips.glob("*.mp4*") if p.is_file())
        most = max(most, with_parts)
        time.sleep(0.2)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    report = next(o for o in json.loads(out)["outputs"] if "clips" in o)
    assert report["written"] >= 4 and report["deleted"] >= 1, report
    # one second's writing may come between two checks of the budget
    assert most <= budget + 12000e3 / 8 * 1.5, (most, report)
    for p in clips.glob("*.mp4"):
        assert _probe(p)["duration"] <= 4 + 1.2, p  # split at the first key frame past max_s


def _h264(frames: int, gop: int) -> list:
    """``frames`` of noise encoded by x264 with a key frame every ``gop``: (key, bytes) each."""
    import numpy as np

    from edgert.apps.camera import media

    Gst = media.gst()
    pipe = Gst.parse_launch(
        "appsrc name=src format=time caps=video/x-raw,format=BGR,width=320,height=240,"
        "framerate=25/1 ! videoconvert ! x264enc tune=zerolatency speed-preset=ultrafast "
        f"bitrate=6000 key-int-max={gop} bframes=0 ! h264parse config-interval=-1 ! "
        "video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false"
    )
    src, sink = pipe.get_by_name("src"), pipe.get_by_name("sink")
    pipe.set_state(Gst.State.PLAYING)
    rng, out = np.random.default_rng(0), []
    for i in range(frames):
        buf = Gst.Buffer.new_wrapped(rng.integers(0, 255, (240, 320, 3), np.uint8).tobytes())
        buf.pts = i * Gst.SECOND // 25
        src.emit("push-buffer", buf)
        sample = sink.emit("try-pull-sample", 5 * Gst.SECOND)
        b = sample.get_buffer()
        out.append((not b.has_flags(Gst.BufferFlags.DELTA_UNIT), b.extract_dup(0, b.get_size())))
    pipe.set_state(Gst.State.NULL)
    return out


@pytest.mark.subprocess
@needs_clips
def test_the_ring_of_a_camera_with_rare_key_frames_stays_bounded(tmp_path, monkeypatch):
    """One key frame, then only delta frames for 40 s (a smart codec's GOP, real x264 packets):
    the ring keeps at most pre + RING_SLACK_S and RING_MAX_BYTES (lowered here to 2 MB), says
    so once, and a clip then starts at the next key frame instead of holding everything since
    the last one; that clip plays from its key frame."""
    from edgert.apps.camera.sinks import clips as clips_sink
    from edgert.apps.camera.sinks.base import SinkContext

    monkeypatch.setattr(clips_sink, "RING_MAX_BYTES", 2 << 20)
    packets = _h264(50, 1000)
    assert packets[0][0] and not any(k for k, _ in packets[1:])
    said = []
    out = clips_sink.ClipsOutput(f"{tmp_path / 'c'}?pre=2", SinkContext(say=said.append))
    stream = out.streams[0]
    stream.t0 = 0.0
    ns = out.Gst.SECOND
    biggest = max(len(d) for _, d in packets)
    for i in range(25 * 40):
        key, data = packets[0] if i == 0 else packets[1 + (i - 1) % 49]
        stream._sample(i * ns // 25, key, data)
        assert stream.ring_bytes <= (2 << 20) + biggest
        span = stream.ring[-1][0] - stream.ring[0][0] if stream.ring else 0
        assert span <= (2 + clips_sink.RING_SLACK_S) * ns
    assert len(said) == 1 and "key frames come more than" in said[0], said
    assert not stream.ring  # the only key frame had to go, and nothing after it can start a clip
    name = stream.event(40.0)
    assert name is not None and stream.clip["start"] is None  # waits for the next key frame
    again = _h264(30, 1000)
    for j, (key, data) in enumerate(again):
        stream._sample(40 * ns + j * ns // 25, key, data)
    assert stream.clip["start"] == 40 * ns
    out.close()
    p = _probe(name)
    assert p["key_first"] and p["frames"] == 30, p


@pytest.mark.subprocess
@needs_clips
def test_a_stream_that_changes_size_without_reconnecting_gives_one_size_per_clip(tmp_path):
    from tests.apps.test_rtsp_real import Server
    from tests.ports import free_ports

    bundle = blob_detector_bundle(tmp_path / "det")
    video = quiet_scene(tmp_path / "scene.mp4")
    clips = tmp_path / "clips"
    with Server(free_ports(1)[0], "--video", str(video), "--switch-at", "50") as server:
        proc = subprocess.run(
            edgert(
                *("camera", bundle, "--source", server.url, "--headless", *SCENE, "--json"),
                *("--clips", f"{clips}?post=600", "--duration", "8"),
            ),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    sizes = {}
    for p in sorted(clips.glob("*.mp4")):
        frames = subprocess.run(
            ["ffprobe", "-v", "error", "-show_entries", "frame=width,height", "-of", "csv=p=0"]
            + [str(p)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        sizes[p.name] = {f.strip(",") for f in frames}
    assert len(sizes) >= 2 and all(len(s) == 1 for s in sizes.values()), sizes
    assert {"320,240", "640,480"} <= set().union(*sizes.values()), sizes


@pytest.mark.subprocess
def test_clip_and_snapshot_folders_say_what_is_wrong(scene, tmp_path):
    bundle, video = scene
    (tmp_path / "afile").write_text("x")
    cases = [
        (("--clips", tmp_path / "afile"), "is not a folder"),
        (("--snapshots", tmp_path / "afile"), "is not a folder"),
        (("--clips", f"{tmp_path}/q?dir"), "after '?' come options as key=value"),
        (("--clips", f"{tmp_path}/c?events=bogus"), "give one or more of track_start"),
        (("--clips", f"{tmp_path}/c?events="), "events= names no event"),
        (("--clips", f"{tmp_path}/c?bitrate=99999999999"), "bitrate 100 to 100000 kbit/s"),
        (("--clips", f"{tmp_path}/c?max_s=0"), "max_s"),
        (("--clips", f"{tmp_path}/c?max_gb=inf"), "above 0"),
    ]
    for args, words in cases:
        assert_user_error(run_cli("camera", bundle, "--source", video, *args), words)
    assert not (tmp_path / "q").exists()


@pytest.mark.subprocess
def test_a_folder_that_cannot_be_written_is_said_before_the_first_event(scene, tmp_path):
    """An existing read-only clips folder failed at the first event with "Could not open file"
    and no reason; now the run stops before it starts, saying why."""
    from tests.conftest import unprivileged

    bundle, video = scene
    for flag in ("--clips", "--snapshots"):
        folder = tmp_path / flag.strip("-")
        folder.mkdir()
        folder.chmod(0o555)
        proc = run_cli(
            *("camera", bundle, "--source", video, "--headless", *SCENE, flag, folder),
            prefix=unprivileged(),
        )
        assert_user_error(proc, "permission denied")
        assert "frames" not in proc.stdout
