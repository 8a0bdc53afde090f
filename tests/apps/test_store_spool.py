"""The PostgreSQL store's spool (apps/store/spool.py) on a real file: rows and deletion marks
kept in order across a reopen (the next run replays them), a line a kill cut short left out,
the bound kept by dropping the oldest (counted), and one run holding it at a time."""

from __future__ import annotations

import pytest

from edgert.apps.store.spool import Spool
from edgert.runtime.errors import OutputError


def _rows(a: int, b: int) -> list:
    return [{"kind": "line_cross", "data": {"seq": i}, "source": object()} for i in range(a, b)]


def test_rows_come_back_in_order_after_a_reopen_and_a_torn_line_is_left_out(tmp_path):
    path = tmp_path / "spool.jsonl"
    s = Spool(path)
    s.append(_rows(0, 5))
    s.append([("gone", "/clips/a.mp4")])
    s.close()
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "line_cro')  # a kill in the middle of a write
    again = Spool(path)
    rows = again.rows()
    assert [r["data"]["seq"] for r in rows[:5]] == list(range(5))
    assert rows[5] == ("gone", "/clips/a.mp4") and len(rows) == 6
    assert "source" not in rows[0]  # the event object itself is the run's, never kept
    again.clear()
    again.close()
    assert not path.exists()  # an empty spool is removed


def test_a_full_spool_drops_its_oldest_rows_and_counts_them(tmp_path):
    s = Spool(tmp_path / "spool.jsonl", max_bytes=4000)
    for i in range(0, 400, 10):
        s.append(_rows(i, i + 10))
    seqs = [r["data"]["seq"] for r in s.rows()]
    assert s.size <= 4000 and s.dropped > 0 and len(seqs) + s.dropped == 400
    assert seqs == list(range(400 - len(seqs), 400))  # the newest, in order
    s.close()


def test_one_run_holds_a_spool_at_a_time(tmp_path):
    s = Spool(tmp_path / "spool.jsonl")
    with pytest.raises(OutputError, match="held by another run"):
        Spool(tmp_path / "spool.jsonl")
    s.close()


def test_a_track_embedding_s_vector_comes_back_as_the_same_bytes(tmp_path):
    """A track's embedding (a compact blob, bytes) spooled while the server is away is replayed
    byte for byte: written as text it reached the server as the text ``b'\\x02...'``."""
    import numpy as np

    from edgert.runtime import embeddings

    blob = embeddings.encode(np.linspace(-1, 1, 64, dtype=np.float32), "int8")
    assert isinstance(blob, bytes)
    row = {"kind": "track_embedding", "data": {}, "embedding": {"model": "m", "vector": blob}}
    s = Spool(tmp_path / "spool.jsonl")
    s.append([row, {"kind": "line_cross", "data": {"raw": b"\xff\x00"}}])
    back = s.rows()
    assert back[0]["embedding"]["vector"] == blob
    assert back[1]["data"]["raw"] == b"\xff\x00"
    s.clear()
    s.close()
