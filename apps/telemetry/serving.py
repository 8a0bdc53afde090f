"""``edgert serve --edgert-metrics-port``: edgert's own /metrics, /live and /ready beside Triton's.

Triton's ``/v2/health/ready`` turns 200 when the server is up, while PyTriton may still be
loading the models (measured: "unknown model" answers for seconds after it). edgert's ``/ready``
is 200 only once every model's own ``/v2/models/NAME/ready`` answers 200 on Triton's HTTP port,
and 503 again as soon as a stop begins (so a load balancer drains before the models unload).
"""

from __future__ import annotations

import collections
import threading
import time
import urllib.error
import urllib.request

from edgert.apps.uris import show_host

from . import require


def local_address(host: str) -> str:
    """Where this machine reaches a server bound to ``host`` (0.0.0.0: loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return show_host(host)


def models_not_ready(host: str, port: int, models: list[str], timeout: float = 1.0) -> list[str]:
    """The models whose ``/v2/models/NAME/ready`` does not answer 200 (now)."""
    waiting = []
    for name in models:
        url = f"http://{local_address(host)}:{port}/v2/models/{name}/ready"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                if r.status == 200:
                    continue
        except (urllib.error.URLError, OSError):
            pass
        waiting.append(name)
    return waiting


class ServeTelemetry:
    def __init__(self, cfg, say=lambda s: None) -> None:
        from .http import Probes, ProbeServer

        pc = require("prometheus_client", "--edgert-metrics-port")
        self.pc, self.cfg = pc, cfg
        self.phase = "loading the bundles"
        self.models: list[str] = []
        self.infos: dict[str, dict] = {}
        self.session = None  # the power session, once serving starts
        self.power = None
        self.swapper = None  # swap.serve.ServeSwapper, once serving starts: GET / POST /model
        self._counts: collections.Counter = collections.Counter()
        self._recent: collections.deque = collections.deque(maxlen=8192)  # (t, n)
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.registry = pc.CollectorRegistry()
        self.registry.register(self)
        self.server = ProbeServer(
            cfg.host,
            cfg.edgert_metrics_port,
            Probes(self.exposition, self.live, self.ready),
            "--edgert-metrics-port",
        )
        self.server.probes.routes[("GET", "/model")] = lambda body: self._model(body, post=False)
        self.server.probes.routes[("POST", "/model")] = lambda body: self._model(body, post=True)
        say(f"edgert metrics: {self.server.url}/metrics, readiness {self.server.url}/ready")

    def _model(self, body: bytes, post: bool) -> tuple[int, bytes, str]:
        from .http import json_answer

        swapper = self.swapper
        if swapper is None:
            return json_answer(503, {"error": f"not serving yet ({self.phase})"})
        return swapper.http_post(body) if post else swapper.http_get(body)

    def start_power(self) -> None:
        """The board's power in /metrics, from a power session (no caps: Triton paces itself)."""
        from edgert.runtime.power.session import PowerOptions, PowerSession

        from .metrics import PowerGauges

        self.session = PowerSession(PowerOptions(sysfs_root=self.cfg.sysfs_root))
        if self.session.meter is not None:
            self.power = PowerGauges(self.session.meter)

    def counter(self, model: str):
        def counted(n: int) -> None:
            with self._lock:
                self._counts[model] += n
                self._recent.append((time.monotonic(), n))

        return counted

    def loaded(self, name: str, model) -> None:
        from .metrics import build_labels

        self.infos[name] = build_labels(model)

    # -- probes -------------------------------------------------------------------------------
    def live(self) -> tuple[bool, dict]:
        return True, {"phase": self.phase}

    def ready(self) -> tuple[bool, dict]:
        if self.phase != "serving":
            return False, {"reason": self.phase}
        waiting = models_not_ready(self.cfg.host, self.cfg.http_port, self.models)
        if waiting:
            return False, {"reason": "models not answering yet", "models": waiting}
        return True, {"models": self.models}

    # -- metrics ------------------------------------------------------------------------------
    def exposition(self) -> tuple[bytes, str]:
        return self.pc.generate_latest(self.registry), self.pc.CONTENT_TYPE_LATEST

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if self.infos:
            labels = ["model", *next(iter(self.infos.values()))]
            info = GaugeMetricFamily(
                "edgert_build_info",
                "edgert, backend, precision, TensorRT and device of each model served",
                labels=labels,
            )
            for name, lab in self.infos.items():
                info.add_metric([name, *lab.values()], 1)
            yield info
        with self._lock:
            counts = dict(self._counts)
            since = time.monotonic() - 2.0
            rate = sum(n for t, n in self._recent if t >= since) / 2.0
        inferences = CounterMetricFamily(
            "edgert_inferences_total",
            "Images or tensor batch rows inferred, per model",
            labels=["model"],
        )
        for name in self.infos:
            for served in (name, f"{name}_image"):
                inferences.add_metric([served], counts.get(served, 0))
        yield inferences
        yield GaugeMetricFamily(
            "edgert_ready", "1 while every model answers", value=float(self.phase == "serving")
        )
        if self.swapper is not None:
            yield from _model_families(self.swapper)
        if self.power is not None:
            yield from self.power.families(rate)

    def close(self) -> None:
        self.server.close()
        if self.session is not None:
            self.session.close()


def _model_families(swapper):
    """``edgert_model_info`` per served model (its bundle's name, version and hash, and Triton's
    version number) and the swaps and refused swaps of the server."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    info = GaugeMetricFamily(
        "edgert_model_info",
        "The bundle each model serves: its name, version and hash, and Triton's version",
        labels=["model", "name", "version", "hash", "triton_version"],
    )
    for served, m, version in swapper.infos():
        info.add_metric([served, m["name"], m["version"], m["hash"], str(version)], 1)
    yield info
    for name, value, what in swapper.counters():
        family = CounterMetricFamily(name, what)
        family.add_metric([], value)
        yield family
