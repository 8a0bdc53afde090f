"""benchmarks/event_store.py's ``--postgres`` (issue 69) on small sizes: a real PostgreSQL
server (tests/apps/pg_server.py) filled through the store's own writer holds every event written
(the benchmark checks the count), and each of the page's filters has a p95 beside SQLite's."""

from __future__ import annotations

import pytest

from tests.apps.pg_server import needs_postgres
from tests.conftest import benchmark

pytestmark = [needs_postgres, pytest.mark.subprocess]


def _bench():
    return benchmark("event_store")


def test_postgres_side_by_side_measures_every_filter_on_a_full_server(tmp_path, capsys):
    bench = _bench()
    sqlite = {300: bench.query_p95(bench.filled(tmp_path, 300), 3)}
    out = bench.postgres_side(tmp_path, [300, 600], 3, sqlite)
    assert out["insert"]["events"] == 20000 and out["insert"]["events_per_s"] > 0
    names = {*bench.FILTERS, "next page"}
    for n in (300, 600):
        assert set(out["query_p95_ms"][n]) == names
        assert all(ms >= 0 for ms in out["query_p95_ms"][n].values())
    printed = capsys.readouterr().out
    assert "SQLite  PostgreSQL" in printed and "nan" in printed  # 600: no SQLite column
