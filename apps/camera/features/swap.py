"""The model slot: SIGHUP, ``--watch-model``, ``--model-endpoint`` (GET and POST /model) replace
the model while the run goes on (``--swap-check``, rollback); ``--check-against`` starts on the
model this one replaces and takes this one through the check (a canary: /ready waits for it).
The swap itself is :mod:`edgert.apps.swap`'s; this is the camera's feature around it."""

from __future__ import annotations

from edgert.apps.swap.camera import EVENTS, Canary, ModelSlot, SwapOptions, catch_hangups
from edgert.apps.uris import escape_controls
from edgert.runtime.errors import OutputError

from .base import Feature, Run


class Swap(Feature):
    """The run's model slot (what the pipeline infers with) and its canary."""

    name = "swap"
    section = "swap"
    help_rank = 60
    needs = ("probes",)  # the canary is a condition of /ready
    after = ("probes", "power", "tracking")  # infers through the cap; a detector if tracked
    events = EVENTS

    canary: Canary | None = None

    @staticmethod
    def add_arguments(parser) -> None:
        SwapOptions.add_arguments(parser)

    @staticmethod
    def from_args(args) -> SwapOptions:
        return SwapOptions.from_args(args)

    def check(self, run: Run) -> None:
        o = run.cfg.swap
        if o.endpoint and not (run.cfg.metrics or run.web):
            raise OutputError(
                "--model-endpoint answers on the --metrics port or the web viewer's: give one "
                "of them"
            )
        if o.against:
            if not (run.cfg.metrics or run.web):
                raise OutputError(
                    "--check-against gives its verdict on /ready: give --metrics [HOST:]PORT "
                    "(or a web viewer)"
                )
            run.start_from = o.against
        # from now on SIGHUP re-reads the bundle path, whatever the run is doing (opening the
        # sources, loading the model, measuring clocks); the handler before is put back at its end
        run.stack.callback(catch_hangups())

    def loaded(self, run: Run) -> None:
        runner = run.runner if run.runner is not None else run.model
        slot = ModelSlot(
            run.first,
            run.load,
            run.cfg.swap,
            runner if runner is not run.model else None,
            run.say,
            run.handler.post_event,
            needs_detector=run.analytics is not None,
            watch_path=str(run.cfg.model.path),
            seen=run.seen,
        )
        run.stack.callback(lambda: slot.current.close())  # the model in use at the end
        run.stack.callback(slot.close)  # first: the swap thread stopped, a spare model closed
        run.slot = slot
        if run.start_from:
            self.canary = Canary(slot, str(run.cfg.model.path))
            run.probes.conditions.append(self.canary)
            run.say(
                escape_controls(  # paths as given: a CR/LF in one cannot forge a line
                    f"canary: started on {run.start_from}; ready once {self.canary.target} passes "
                    "the check on live frames"
                )
            )

    def routes(self, run: Run) -> dict:
        # answered once the pipeline exists: a stop after /model answers is held until the
        # pipeline's loop takes it (the run's summary is written)
        return {
            ("GET", "/model"): lambda body=b"": run.slot.http_get(body),
            ("POST", "/model"): lambda body: run.slot.http_post(body),
        }

    def attach(self, run: Run) -> None:
        run.slot.start()
        if self.canary is not None:
            self.canary.start()

    def on_events(self, run: Run, events: list, frame) -> None:
        label = run.slot.label_of(frame)  # the model that made them (the frame's, else in use)
        for e in events:
            e.setdefault("model", label)

    def close(self, run: Run) -> None:
        run.slot.close()  # no swap after the pipeline ended; its events still go to the sinks
        run.handler.flush_events()

    def report(self, run: Run, summary: dict) -> None:
        summary["model"] = run.slot.report()

    def families(self, run: Run):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        return model_families(run.slot, GaugeMetricFamily, CounterMetricFamily)


def model_families(slot, gauge, counter):
    """The model in use (``edgert_model_info``, as Prometheus' *_info convention has it) and the
    swaps, rollbacks and refused swaps of the run."""
    info = slot.current.info
    model = gauge(
        "edgert_model_info",
        "The model in use: its name, version and bundle hash",
        labels=list(info),
    )
    model.add_metric([str(v) for v in info.values()], 1)
    yield model
    for name, value, what in slot.counters():
        family = counter(name, what)
        family.add_metric([], value)
        yield family
