"""``--track``, ``--line``, ``--zone`` (or a sink that follows objects): a tracker and its
counters per stream; its events, counts on /metrics and in the summary."""

from __future__ import annotations

from ..analytics import Analytics, TrackingOptions, check_in_frame, check_task, parse_all
from .base import Feature, Run


class Tracking(Feature):
    """Track IDs into each frame's results, the counters' events onto the frame."""

    name = "tracking"
    section = "tracking"
    help_rank = 20
    events = ("track_start", "track_end", "line_cross", "zone_enter", "zone_exit")

    @staticmethod
    def add_arguments(parser) -> None:
        from edgert.runtime.tasks import TASK_SPECS

        TrackingOptions.add_arguments(
            parser, " and ".join(t.name for t in TASK_SPECS.values() if t.boxes)
        )

    @staticmethod
    def from_args(args) -> TrackingOptions:
        return TrackingOptions.from_args(args)

    def check(self, run: Run) -> None:
        cfg = run.cfg
        if not cfg.tracks:
            return
        t = cfg.tracking
        run.geometries = parse_all(list(t.lines), list(t.zones), len(cfg.sources))
        if run.bundle is not None:
            from edgert.runtime.tasks import task_spec

            task = cfg.model.task or run.bundle.manifest.task
            if not task_spec(task).takes_any:  # a generic bundle: checked once --task loads it
                check_task(task, cfg.tracking_asked_by())

    def open(self, run: Run) -> None:
        if run.geometries:
            for i, source in enumerate(run.sources):
                check_in_frame(run.geometries, i, source.size)

    def loaded(self, run: Run) -> None:
        cfg = run.cfg
        if not cfg.tracks:
            return
        check_task(run.model.task, cfg.tracking_asked_by())
        t = cfg.tracking
        run.analytics = Analytics(
            len(run.sources),
            run.geometries,
            t.count_anchor,
            t.lost_seconds,
            t.tracker,
            t.thresholds(cfg.model.conf),
        )

    def on_frame(self, run: Run, frame) -> None:
        if run.analytics is not None:  # track IDs into the results, events onto the frame
            run.analytics.update(frame)

    def close(self, run: Run) -> None:
        if run.analytics is not None:  # the tracks still live end
            run.sinks.events(run.handler.labelled(run.analytics.finish()))

    def report(self, run: Run, summary: dict) -> None:
        if run.analytics is not None:
            for st in summary["streams"]:
                st["counts"] = run.analytics.counts(st["stream"])
                st["tracked"] = run.analytics.coverage.report(st["stream"])
            summary["events"] = dict(run.analytics.event_counts)
            summary["tracker"] = run.analytics.thresholds

    def families(self, run: Run):
        return count_families(run.analytics) if run.analytics is not None else ()

    @staticmethod
    def summary_lines(s: dict) -> list:
        """Each line's and zone's counts."""
        streams = s.get("streams") or []
        lines = []
        for st in streams:
            for name, c in (st.get("counts") or {}).items():
                where = f"[{st['stream']}] " if len(streams) > 1 else ""
                if c["type"] == "line":
                    lines.append(f"{where}line {name}: in {c['in']}, out {c['out']}")
                    continue
                dwell = c["dwell_s_mean"]
                dwell = f", mean dwell {dwell:.1f} s" if dwell is not None else ""
                lines.append(
                    f"{where}zone {name}: {c['entries']} entries, {c['exits']} exits{dwell}"
                )
        return lines


def count_families(analytics):
    """Line crossings, zone entries and exits, and the tracks in each zone now."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    cross = CounterMetricFamily(
        "edgert_line_crossings_total",
        "Tracks that crossed a line",
        labels=["stream", "line", "direction"],
    )
    entries = CounterMetricFamily(
        "edgert_zone_entries_total", "Tracks that entered a zone", labels=["stream", "zone"]
    )
    exits = CounterMetricFamily(
        "edgert_zone_exits_total", "Tracks that left a zone", labels=["stream", "zone"]
    )
    inside = GaugeMetricFamily(
        "edgert_zone_objects", "Tracks in a zone now", labels=["stream", "zone"]
    )
    for stream in range(len(analytics.streams)):
        k = str(stream)
        for name, c in analytics.counts(stream).items():
            if c["type"] == "line":
                cross.add_metric([k, name, "in"], c["in"])
                cross.add_metric([k, name, "out"], c["out"])
            else:
                entries.add_metric([k, name], c["entries"])
                exits.add_metric([k, name], c["exits"])
                inside.add_metric([k, name], c["occupancy"])
    return [cross, entries, exits, inside]
