"""``--metrics [HOST:]PORT`` (or a web viewer's port): /metrics, /live and /ready, which says
503 while the model loads; every feature's families and routes are served here."""

from __future__ import annotations

import itertools

from .base import Feature, Run


class Probes(Feature):
    """The probe server and the metrics registry."""

    name = "probes"
    section = "metrics"
    help_rank = 40

    @staticmethod
    def add_arguments(parser) -> None:
        from ..sinks import MqttOptions

        m = parser.add_argument_group("telemetry (pip install 'edgert[telemetry]')")
        m.add_argument(
            "--metrics",
            metavar="[HOST:]PORT",
            help="Prometheus /metrics and the /live and /ready probes on HOST:PORT (host "
            "127.0.0.1 unless given); the web viewer's port serves them too",
        )
        MqttOptions.add_arguments(m)  # the MQTT sink's flags stand in the telemetry group

    @staticmethod
    def from_args(args):
        return args.metrics

    def open(self, run: Run) -> None:
        from ..metrics import CameraProbes

        run.probes = CameraProbes(run.cfg.metrics, run.web, run.say)
        run.stack.callback(run.probes.close)

    def loaded(self, run: Run) -> None:
        m = run.cfg.model
        run.probes.loaded(run.model, m.precision if m.precision != "auto" else None)

    def attach(self, run: Run) -> None:
        def families():
            return itertools.chain.from_iterable(f.families(run) for f in run.features)

        run.probes.attach(run.pipeline, sinks=run.sinks.all, families=families)
        run.probes.probes.routes.update(run.routes)  # merged at start (features.merge_routes)

    def report(self, run: Run, summary: dict) -> None:
        summary.update(run.probes.report())
