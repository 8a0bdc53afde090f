"""``edgert camera --help`` is made from the tables it describes (issue 67): every row of the
sources', the sinks' and the gate policies' tables is in it, with what it is, and every sink row's
short flag is an option that makes that row's URI. A row added to a table is in the help; the help
cannot go stale beside it again (the epilog listed 3 of 9 sink forms)."""

from __future__ import annotations

import pytest

from edgert.apps.camera import sinks, sources
from edgert.apps.camera.gate import POLICIES


def _help(monkeypatch) -> str:
    from edgert.apps.cli import build_parser

    monkeypatch.setenv("COLUMNS", "100")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return " ".join(sub.choices["camera"].format_help().split())  # the wrapping folded


def test_every_source_and_sink_row_is_in_the_camera_help_with_what_it_is(monkeypatch):
    text = _help(monkeypatch)
    for table in (sources.SCHEMES, sinks.SCHEMES):
        for name, row in table.items():
            assert row.says, f"{name}:// says nothing for the help"
            assert f"{row.form}" in text and row.says in text, name
    # --output's own list names every form, in the table's order
    listed = text.split("--output URI", 2)[2].split("; repeat for several")[0]
    assert [f.strip() for f in listed.split(", ")] == [e.form for e in sinks.SCHEMES.values()]


def test_every_gate_policy_is_in_the_gate_option(monkeypatch):
    text = _help(monkeypatch)
    metavar = "|".join(p.form for p in POLICIES.values())
    assert f"--gate {metavar}" in text
    for p in POLICIES.values():
        assert p.help and f"{p.form}" in text and p.help in text, p.form


@pytest.mark.parametrize("flag", sinks.short_flags())
def test_each_short_flag_is_an_option_that_makes_its_rows_uri(flag, monkeypatch, tmp_path):
    """``--jsonl FILE`` is ``--output jsonl://FILE``: the run's sinks hold that row's URI."""
    from edgert.apps.cli import build_parser
    from edgert.apps.commands.camera import config

    rows = {name: e for name, e in sinks.SCHEMES.items() if e.flag == flag}
    name, row = next(iter(rows.items()))
    value = str(tmp_path / "out") if row.paths else f"{name}://127.0.0.1/edgert"
    text = _help(monkeypatch)
    assert flag in text and f"(or {flag} " in text
    args = build_parser().parse_args(["camera", "m.onnx", flag, value])
    got = [u for u in config(args).sink_uris() if sinks.resolve(u)[0] in rows]
    assert got and sinks.scheme_of(got[0]).flag == flag, got


def test_listening_sinks_say_where_and_only_the_viewer_answers_the_probes():
    """Components declare what they need (``Scheme.listens``, ``Scheme.probes``) instead of
    being compared by name: the ports check and ``--model-endpoint`` read these."""
    assert sinks.listener("http://127.0.0.1:8081")[1:] == ("127.0.0.1", 8081, True)
    assert sinks.listener("rtsp://0.0.0.0:8554/cam")[1:] == ("0.0.0.0", 8554, False)
    assert sinks.listener("jsonl://x.jsonl") is None
    assert sinks.serves_probes(["jsonl://x.jsonl", "http://127.0.0.1:8081"])
    assert not sinks.serves_probes(["rtsp://0.0.0.0:8554/cam", "nope://x"])
    assert sinks.view_rate("http://127.0.0.1:8081?fps=4") == 4
    assert sinks.view_rate("display://0") is None
