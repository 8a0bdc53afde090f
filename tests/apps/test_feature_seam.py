"""The camera's feature seam (issue 67 step 1): a feature is one class and one row of
``features.FEATURES``. A toy feature defined here adds an option, a per-frame step, a metric
family, a summary line, a route and an event kind, and each works through the real camera
(the command's own parser, a real run on the synthetic source, /metrics and the route over real
HTTP, the summary printed, the event in the ``--events`` JSON lines) with no other change. What
a feature declares of the others (needs, order, routes, event kinds) is checked at start."""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request

import pytest

from edgert.apps.camera import features
from edgert.apps.commands import camera as command
from edgert.apps.telemetry.http import json_answer
from tests.ports import free_ports
from tests.tiny import blob_detector_bundle

prom_parser = pytest.importorskip("prometheus_client.parser")


class Toy(features.Feature):
    """Says every Nth frame it sees (``--toy-every N``): an event, a counter, a route, a line."""

    name = "toy"
    section = "toy"  # not a field of CameraConfig: it lands in cfg.more
    events = ("toy_seen",)
    needs = ("tracking",)
    after = ("tracking",)  # tracking writes the frame's events; the toy adds to them

    def __init__(self) -> None:
        self.frames = self.seen = 0

    @staticmethod
    def add_arguments(parser) -> None:
        parser.add_argument("--toy-every", type=int, default=5, metavar="N", help="a toy's rate")

    @staticmethod
    def from_args(args) -> int:
        return args.toy_every

    def on_frame(self, run, frame) -> None:
        self.frames += 1
        if frame.index % run.cfg.section("toy") == 0:
            self.seen += 1
            frame.events.append({"event": "toy_seen", "stream": frame.stream, "frame": frame.index})

    def families(self, run):
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily("edgert_toy_seen_total", "Frames the toy saw")
        family.add_metric([], self.seen)
        yield family

    def routes(self, run) -> dict:
        return {("GET", "/toy"): lambda body=b"": json_answer(200, {"seen": self.seen})}

    def report(self, run, summary: dict) -> None:
        summary["toy"] = {"frames": self.frames, "seen": self.seen}

    @staticmethod
    def summary_lines(s: dict) -> list:
        return (
            [f"toy: {s['toy']['seen']} of {s['toy']['frames']} frames seen"] if "toy" in s else []
        )


def _parser():
    """``edgert camera``'s own parser (the command's add_parser), and its help."""
    parser = argparse.ArgumentParser(prog="edgert")
    sub = parser.add_subparsers()
    command.add_parser(sub)
    return parser, sub.choices["camera"].format_help()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as r:
            return r.status, r.read()
    except OSError:
        return 0, b""


def _scrape(port: int, got: dict, done: threading.Event) -> None:
    """/toy and /metrics over HTTP while the camera runs, until both show the toy's count."""
    while not done.is_set() and len(got) < 2:
        code, body = _get(f"http://127.0.0.1:{port}/toy")
        if code == 200 and json.loads(body)["seen"] > 0:
            got.setdefault("route", json.loads(body))
        code, body = _get(f"http://127.0.0.1:{port}/metrics")
        if code == 200:
            fams = {f.name: f for f in prom_parser.text_string_to_metric_families(body.decode())}
            seen = fams.get("edgert_toy_seen")
            if seen is not None and seen.samples[0].value > 0:
                got.setdefault("metric", seen.samples[0].value)
        time.sleep(0.1)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    return blob_detector_bundle(tmp_path_factory.mktemp("seam") / "det")


def test_a_toy_feature_is_one_table_row_through_the_real_camera(
    detector, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(features, "FEATURES", (*features.FEATURES, Toy))
    parser, helped = _parser()
    assert "--toy-every N" in helped and "a toy's rate" in helped
    port = free_ports(1)[0]
    events = tmp_path / "events.jsonl"
    args = parser.parse_args(
        [
            "camera",
            str(detector),
            "--source",
            "synthetic://",
            "--duration",
            "4",
            "--headless",
            "--metrics",
            str(port),
            "--events",
            str(events),
            "--toy-every",
            "3",
        ]
    )
    got: dict = {}
    done = threading.Event()
    scraper = threading.Thread(target=_scrape, args=(port, got, done), daemon=True)
    scraper.start()
    try:
        code = args.func(args)  # the command's run: config, run_camera, the printed summary
    finally:
        done.set()
        scraper.join(5)
    out = capsys.readouterr().out
    assert code == 0, out
    assert got["route"]["seen"] > 0 and got["metric"] > 0  # answered over HTTP during the run
    line = next(x for x in out.splitlines() if x.startswith("toy: "))
    seen, frames = int(line.split()[1]), int(line.split()[3])
    assert frames > 10 and frames / 4 < seen <= frames / 2  # about a third (a frame may drop)
    toys = [r for r in map(json.loads, events.read_text().splitlines()) if r["event"] == "toy_seen"]
    assert len(toys) == seen and {r["frame"] % 3 for r in toys} == {0}  # --toy-every 3 reached it
    assert toys[0]["model"]  # the swap feature's mark, as on every event


def _cfg(detector, **more):
    from edgert.apps.camera import CameraConfig, ModelOptions, RunOptions, SinkOptions

    return CameraConfig(
        ModelOptions(str(detector)),
        sources=["synthetic://"],
        sink_options=SinkOptions(headless=True),
        run=RunOptions(max_frames=2),
        **more,
    )


@pytest.mark.parametrize(
    "toy, said",
    [
        (dict(needs=("lidar",)), "camera feature toy needs lidar, which this run lacks"),
        (dict(after=("toy2",)), "camera feature toy must come after toy2"),
        (dict(events=("track_end",)), "event track_end is emitted by both tracking and toy"),
        (
            dict(routes=lambda self, run: {("GET", "/model"): None}),
            "GET /model is answered by both swap and toy",
        ),
        (
            dict(routes=lambda self, run: {("GET", "/metrics"): None}),
            "GET /metrics is answered by both the probes and toy",
        ),
    ],
)
def test_what_a_feature_declares_of_the_others_is_checked_before_anything_opens(
    detector, monkeypatch, toy, said
):
    """A need missing, an order broken, an event kind twice, a route twice: one sentence at
    start, before a source or the model opens."""
    from edgert.apps.camera import run_camera

    opened = []
    bad = type("Toy", (features.Feature,), {"name": "toy", **toy})
    later = type(
        "Toy2", (features.Feature,), {"name": "toy2", "open": lambda s, r: opened.append(1)}
    )
    monkeypatch.setattr(features, "FEATURES", (*features.FEATURES, bad, later))
    with pytest.raises(features.TableError) as info:
        run_camera(_cfg(detector))
    assert str(info.value) == said and not opened


def test_the_table_as_it_stands_fits_together():
    """The camera's and the library's tables pass their own checks; options stand in --help
    where they stood before the seam (docs/cli.md is generated from it, and unchanged); every
    kind the features say they emit is in the events' table, and every kind there is emitted."""
    features.check_table(features.FEATURES)
    features.check_table(features.LIBRARY_FEATURES)
    ranks = [f.help_rank for f in sorted(features.FEATURES, key=lambda f: f.help_rank)]
    assert len(set(ranks)) == len(ranks)
    from edgert.apps.camera.sinks.clips import EVENTS
    from edgert.runtime.events import KINDS

    emitted = {k for f in features.FEATURES for k in f.events}
    assert emitted <= set(KINDS) and set(EVENTS) <= emitted  # the kinds clips may be cut on
    assert set(KINDS) - emitted == {"run_start"}  # the events file's own line


def test_a_request_naming_a_secondary_never_reaches_the_primarys_swap_before_the_stage_attaches():
    """The probes answer while the model loads; until the second stage attached its queues, a
    ``POST /model`` naming a secondary is 503 (it once went to the primary's slot as a swap of
    the primary), and any other goes to the primary's route as declared."""
    from edgert.apps.camera.features.secondary import Secondaries

    seen = []

    def primary(body: bytes):
        seen.append(body)
        return 202, b"{}", "application/json"

    post = Secondaries().routes(None)[("POST", "/model")].wrap(primary)
    code, text, _ = post(b'{"secondary": "kind", "bundle": "/m.edgert"}')
    assert code == 503 and b"starting" in text and seen == []
    code, _, _ = post(b'{"bundle": "/m.edgert"}')
    assert code == 202 and seen == [b'{"bundle": "/m.edgert"}']
