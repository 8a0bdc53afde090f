"""MQTT publishes only what the store committed (issue 69): benchmarks/store_kill.py's ``--mqtt``
variant with a few kills: the camera's own store and MQTT sinks against a real Mosquitto and a
QoS 1 subscriber, the writer killed with SIGKILL at random moments; every event the subscriber
received is in the store. The order before (MQTT as the events come) loses some: the same
harness shows it, so the check can fail."""

from __future__ import annotations

import pytest

from tests.apps.test_telemetry import needs
from tests.conftest import benchmark


def _harness():
    return benchmark("store_kill")


@pytest.mark.subprocess
@needs["mosquitto"]
def test_every_event_published_over_mqtt_is_in_the_store_after_kills():
    report = _harness().run(5, False, seed=5, mqtt="after")
    assert report["corrupt"] == 0 and report["acked_lost"] == 0, report
    assert report["events_published"] > 0, report
    assert report["published_lost"] == 0, report


@pytest.mark.subprocess
@needs["mosquitto"]
def test_publishing_as_events_come_loses_published_events_to_a_kill():
    report = _harness().run(5, False, seed=5, mqtt="first")
    assert report["published_lost"] > 0, report
