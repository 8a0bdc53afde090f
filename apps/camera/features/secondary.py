"""``--secondary BUNDLE[:OPTIONS]``: second-stage models on crops of the tracks, on their own
thread (:mod:`..secondary`); one that fails to load is said and left out. ``POST /model`` naming
``"secondary": NAME`` swaps that secondary (the endpoint's rules: --model-endpoint,
--allow-models; :mod:`edgert.apps.swap.secondary`); ``GET /model`` lists the secondaries."""

from __future__ import annotations

from typing import Any

from edgert.apps.swap.core import json_body
from edgert.apps.telemetry.http import json_answer
from edgert.apps.uris import escape_controls

from .base import Extend, Feature, Run

HELP = (
    "a second model on crops of the tracked objects (a classifier: their kind; a detector: "
    "objects inside them, boxes in the frame's pixels; an embedder: one vector per track, kept "
    "in the store for GET /api/search, and re-identification across streams); repeatable; "
    "implies --track. OPTIONS, "
    "comma-separated: on=LABEL+LABEL (the primary labels it runs on; default every), "
    "streams=N+N (the streams it runs on, a site file's cameras: [NAME, ...]; default every), "
    "attempts=K "
    "(most per track, default 3), margin=F (share of each side added, default 0.1), grow=F "
    "(re-check when the box grew by this share, default 0.2), every=S (re-check after S seconds, "
    "0 never, default 1), min=PX (smaller boxes are refused, default 16), window=S (the best "
    "view chosen over S seconds, default 0.5), name=NAME; an embedder's: embed=mean|best (the "
    "quality-weighted mean of its crops' vectors, default, or the best crop's), "
    "form=int8|float16|float32 (as stored, default int8), reid=COS (a new track is linked to "
    "another stream's track this similar, default 0.85, 0 off), reid_window=S (seen within S "
    "seconds, default 30)"
)


class Secondaries(Feature):
    """The second stage and, with --model-endpoint, one swap queue per secondary."""

    name = "secondary"
    section = "secondaries"
    help_rank = 30
    needs = ("tracking", "swap")  # the tracks' crops; the primary's /model it extends
    after = ("tracking", "swap")
    events = ("track_label", "track_embedding", "track_reid", "model_swap_superseded")

    stage: Any = None  # secondary.SecondaryStage
    model_routes: Any = None  # apps.swap.secondary.ModelRoutes, once attached

    @staticmethod
    def add_arguments(parser) -> None:
        parser.add_argument(
            "--secondary", action="append", default=[], metavar="BUNDLE[:OPTIONS]", help=HELP
        )

    @staticmethod
    def from_args(args) -> tuple:
        from .secondary_models import SecondarySpec

        return tuple(SecondarySpec.parse(x) for x in args.secondary)

    def check(self, run: Run) -> None:
        from .secondary_spec import check_streams

        check_streams(run.cfg.secondaries, len(run.cfg.sources))

    def loaded(self, run: Run) -> None:
        specs = run.cfg.secondaries
        if not specs:
            return
        from edgert.runtime.tasks import load_task_model

        from .secondary_models import SecondaryStage, load_all, warn
        from .secondary_spec import unknown_on

        m = run.cfg.model

        def load(path):
            return load_task_model(path, None, m.backend, "auto", spin=False)  # its own best

        found = load_all(specs, load, run.say)
        if not found:
            return
        self.stage = SecondaryStage(found)
        run.stack.callback(self.stage.close)
        for s in found:
            unknown = unknown_on(s.spec, getattr(run.model, "labels", None))
            if unknown:  # said at start: it would run on nothing of those, silently
                warn(unknown, run.say)
            on = "+".join(s.spec.on) or "every label"
            if s.spec.streams:
                on += f" of stream {'+'.join(map(str, s.spec.streams))}"
            run.say(
                escape_controls(
                    f"secondary: {s.name} ({s.model.task}) on {on}, at most {s.spec.attempts} "
                    "attempts per track"
                )
            )

    def on_frame(self, run: Run, frame) -> None:
        if self.stage is not None:  # crops of its tracks; their labels on its objects
            self.stage.on_frame(frame, run.handler)

    def on_events(self, run: Run, events: list, frame) -> None:
        if self.stage is not None:  # what the second stage says of their tracks
            self.stage.enrich(events)

    def attach(self, run: Run) -> None:
        probes = getattr(run.probes, "probes", None)
        if self.stage is not None and probes is not None:  # POST /api/search's pictures
            for s in self.stage.secondaries:
                if s.embeds:
                    probes.embedders[s.name] = s.embed_image
                    probes.text_embedders[s.name] = s  # GET /api/search?text= when has_text
        if run.slot is not None:  # with --model-endpoint a swap queue and thread per secondary
            from edgert.apps.swap.secondary import ModelRoutes, start_swaps

            self.model_routes = ModelRoutes(run.slot, self.stage, start_swaps(run, self.stage))

    def routes(self, run: Run) -> dict:
        """``/model`` extended: a POST naming ``"secondary"`` goes to that secondary's queue,
        ``GET`` lists the secondaries (:class:`edgert.apps.swap.secondary.ModelRoutes`, once
        attached; before, the primary's route, and 503 to a request naming a secondary)."""

        def post(primary):
            def answer(body: bytes):
                if self.model_routes is not None:
                    return self.model_routes.post(body)
                data = json_body(body)
                if isinstance(data, dict) and "secondary" in data:  # never the primary's swap
                    return json_answer(503, {"error": "the camera is starting: try again"})
                return primary(body)

            return answer

        def get(primary):
            def answer(body: bytes = b""):
                return (self.model_routes.get if self.model_routes else primary)(body)

            return answer

        return {("POST", "/model"): Extend(post), ("GET", "/model"): Extend(get)}

    def close(self, run: Run) -> None:
        if self.stage is not None:  # the held crops tried, the answers in, before tracks end
            run.sinks.events(self.stage.finish())  # track_label events, as during the run

    def report(self, run: Run, summary: dict) -> None:
        if self.stage is not None:
            summary["secondary"] = self.stage.report()
            if self.stage.errors:
                summary["secondary_errors"] = list(self.stage.errors)

    def families(self, run: Run):
        return secondary_families(self.stage) if self.stage is not None else ()

    @staticmethod
    def summary_lines(s: dict) -> list:
        lines = [
            f"secondary {r['name']} ({r['task']}): {r['crops']} crops in {r['calls']} calls, "
            f"{r['tracks_attempted']} tracks, {r['attempts_per_track']:g} attempts a track "
            f"(at most {r['most_attempts']}); refused for size {r['refused_size']}, dropped "
            f"from the full queue {r['dropped']}"
            for r in s.get("secondary") or []
        ]
        return lines + [f"secondary failed: {err}" for err in s.get("secondary_errors") or []]


def secondary_families(stage):
    """Second-stage models: calls, crops, crops refused for size and dropped from the full
    queue, and attempts per track (the tracks attempted so far), per model."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families = {
        "calls": CounterMetricFamily(
            "edgert_secondary_calls_total", "Inference calls of a secondary model", labels=["model"]
        ),
        "crops": CounterMetricFamily(
            "edgert_secondary_crops_total", "Crops a secondary model ran on", labels=["model"]
        ),
        "refused_size": CounterMetricFamily(
            "edgert_secondary_refused_total",
            "Candidate crops refused (reason: size, under the secondary's min; not_finite, a "
            "box or answer NaN or inf; memory, the held crops' bound)",
            labels=["model", "reason"],
        ),
        "dropped": CounterMetricFamily(
            "edgert_secondary_dropped_total",
            "Crops dropped from the secondary's full queue (the lowest quality first)",
            labels=["model"],
        ),
        "tracks_attempted": CounterMetricFamily(
            "edgert_secondary_tracks_total", "Tracks a secondary model was run on", labels=["model"]
        ),
        "attempts_per_track": GaugeMetricFamily(
            "edgert_secondary_calls_per_track",
            "Mean attempts per track attempted (crops per track)",
            labels=["model"],
        ),
    }
    for r in stage.report():
        for key, family in families.items():
            labels = [r["name"], "size"] if key == "refused_size" else [r["name"]]
            family.add_metric(labels, r[key])
        for reason in ("not_finite", "memory"):
            key = "not_finite" if reason == "not_finite" else "refused_memory"
            families["refused_size"].add_metric([r["name"], reason], r[key])
    return list(families.values())
