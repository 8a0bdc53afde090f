"""Event-gated inference (``--gate``, ``--target-fps``): which frames are inferred; its counts
on /metrics and in the summary."""

from __future__ import annotations

from ..gate import GateOptions, check_masks_in_frame, gates_for
from .base import Feature, Run


class Gate(Feature):
    """The streams' gates (the tracker, where there is one, predicts the frames skipped)."""

    name = "gate"
    section = "gate"
    help_rank = 50
    after = ("tracking",)  # the gates read the tracker's hints

    @staticmethod
    def add_arguments(parser) -> None:
        GateOptions.add_arguments(parser)

    @staticmethod
    def from_args(args) -> GateOptions:
        return GateOptions.from_args(args)

    def check(self, run: Run) -> None:
        run.gates = gates_for(run.cfg.gate, len(run.cfg.sources))  # its masks checked here

    def open(self, run: Run) -> None:
        for i, source in enumerate(run.sources):
            check_masks_in_frame(run.cfg.gate, i, source.size)

    def loaded(self, run: Run) -> None:
        if run.gates is None:
            return
        if run.analytics is not None:
            run.analytics.gates = run.gates
        run.say(f"gate: {gate_says(run.cfg.gate, run.model.task, run.analytics is not None)}")

    def families(self, run: Run):
        return gate_families(run.gates) if run.gates is not None else ()

    @staticmethod
    def summary_lines(s: dict) -> list:
        """Each stream's gate: frames inferred of those seen, and why."""
        streams = s.get("streams") or []
        lines = []
        for st in streams:
            g = st.get("gate")
            if g and g["inferred"] + g["skipped"]:
                where = f"[{st['stream']}] " if len(streams) > 1 else ""
                why = ", ".join(
                    f"{k} {n}" for k, n in sorted(g["reasons"].items(), key=lambda kv: -kv[1])
                )
                lines.append(
                    f"{where}gate {g['mode']}: {g['inferred']} of {g['inferred'] + g['skipped']} "
                    f"frames inferred ({100 * g['inferred_share']:.1f} %: {why or 'none'})"
                )
        return lines


def gate_says(o: GateOptions, task: str, tracking: bool) -> str:
    """What the gate does for this run, in a sentence (a camera's own mode or rate after it)."""

    def one(x: GateOptions) -> str:
        if x.mode == "off" and x.target_fps is None:
            return "off: inference on every frame"
        which = x.policy.says(x)
        if x.mode != "off" and x.target_fps is not None:
            which += f", at most {x.target_fps:g} a second"
        return f"{x.mode}: inference on {which}"

    own = sorted({int(f.partition(":")[0]) for f in (*o.streams, *o.stream_rates)})
    said = one(o) + "".join(f"; stream {i}: {one(o.for_stream(i))}" for i in own)
    between = (
        "the tracker predicts the frames between (results marked predicted)"
        if tracking
        else f"the frames between repeat the last {task} results, marked predicted"
    )
    return f"{said}; {between}"


def gate_families(gates):
    """Event-gated inference: frames sent to inference per stream and reason, frames skipped."""
    from prometheus_client.core import CounterMetricFamily

    inferred = CounterMetricFamily(
        "edgert_frames_inferred_total",
        "Frames the gate sent to inference, by reason (motion, tracks, geometry, keyframe, ...)",
        labels=["stream", "reason"],
    )
    skipped = CounterMetricFamily(
        "edgert_frames_skipped_total",
        "Frames the gate skipped (their results predicted)",
        labels=["stream"],
    )
    for i, gate in enumerate(gates):
        if gate is None:  # a removed stream's, let go
            continue
        r = gate.report()
        for reason, n in r["reasons"].items():
            inferred.add_metric([str(i), reason], n)
        skipped.add_metric([str(i)], r["skipped"])
    return [inferred, skipped]
