"""A ``.pt2`` is a zip that torch.export.load may unpickle parts of (fault battery 6, G1): weights or
constants marked ``use_pickle``, opaque objects, sample inputs that fail ``weights_only=True``
(torch then retries with ``weights_only=False``), the pre-2.7 format. Each hostile archive is made
here from a real ``torch.export.save`` file; its payload writes a marker file when unpickled. Without
``--trust-pickle`` edgert refuses in one sentence and the payload never runs."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli


class _Payload:
    """Unpickling it writes MARKER, then hands back ``value`` (what the archive expects there)."""

    def __init__(self, marker: Path, value: str) -> None:
        self.marker, self.value = str(marker), value

    def __reduce__(self):
        code = f"open({self.marker!r}, 'w').write('ran') and None or {self.value}"
        return (eval, (code,))


def _good(folder: Path) -> Path:
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    path = folder / "good.pt2"
    torch.export.save(torch.export.export(net, (torch.randn(1, 3, 16, 16),)), str(path))
    return path


def _rewrite(src: Path, dst: Path, change) -> Path:
    """Copy the archive SRC to DST, passing each (name, bytes) through CHANGE (None drops it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename.replace("good/", f"{dst.stem}/"), data)
    return dst


def _pickled(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _pickled_weight(folder: Path, marker: Path) -> Path:
    weight = "__import__('torch').nn.Parameter(__import__('torch').zeros(4, 3, 3, 3))"

    def change(name: str, data: bytes):
        if name.endswith("model_weights_config.json"):
            cfg = json.loads(data)
            cfg["config"]["0.weight"]["use_pickle"] = True
            return json.dumps(cfg).encode()
        if name.endswith("data/weights/weight_0"):
            return _pickled(_Payload(marker, weight))
        return data

    return _rewrite(_good(folder), folder / "weight.pt2", change)


def _pickled_sample_inputs(folder: Path, marker: Path) -> Path:
    inputs = "((__import__('torch').randn(1, 3, 16, 16),), {})"

    def change(name: str, data: bytes):
        if "data/sample_inputs/" in name:
            return _pickled(_Payload(marker, inputs))
        return data

    return _rewrite(_good(folder), folder / "inputs.pt2", change)


def _opaque_constant(folder: Path, marker: Path) -> Path:
    def change(name: str, data: bytes):
        if name.endswith("model_constants_config.json"):
            cfg = {"config": {"c": {"path_name": "opaque_obj_0", "use_pickle": True}}}
            return json.dumps(cfg).encode()
        return data

    path = _rewrite(_good(folder), folder / "opaque.pt2", change)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("opaque/data/constants/opaque_obj_0", _pickled(_Payload(marker, "1")))
    return path


def _aoti(folder: Path, marker: Path) -> Path:
    path = _rewrite(_good(folder), folder / "aoti.pt2", lambda name, data: data)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("aoti/data/aotinductor/model/model.so", b"\x7fELF not really")
    return path


def _legacy(folder: Path, marker: Path) -> Path:
    """The pre-2.7 layout (a zip with a 'version' file): its state is torch.load-ed, pickle and all."""
    path = folder / "legacy.pt2"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("version", "8.0")
        zf.writestr("serialized_exported_program.json", b"{}")
        zf.writestr("serialized_state_dict.pt", _pickled(_Payload(marker, "{}")))
    return path


HOSTILE = {
    "a weight marked use_pickle": (_pickled_weight, "pickled weight"),
    "sample inputs that need a full unpickle": (_pickled_sample_inputs, "sample inputs"),
    "an opaque constant (pickle.loads)": (_opaque_constant, "pickled constant"),
    "AOTInductor code": (_aoti, "compiled AOTInductor code"),
    "the pre-2.7 format": (_legacy, "older .pt2 format"),
}


@pytest.mark.subprocess
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_pt2_that_would_unpickle_is_refused_without_trust(tmp_path, case):
    make, words = HOSTILE[case]
    marker = tmp_path / "PWNED"
    evil = make(tmp_path, marker)
    out = tmp_path / "evil.edgert"
    proc = run_cli("export", evil, "-o", out)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--trust-pickle" in lines[0] and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert not marker.exists(), f"{case}: the payload ran"
    assert not out.exists()


@pytest.mark.subprocess
def test_trust_pickle_lets_a_pickled_weight_load(tmp_path):
    """The flag means what it says: the user trusts the file, so it loads (and its pickle runs)."""
    marker = tmp_path / "ran"
    evil = _pickled_weight(tmp_path, marker)
    out = tmp_path / "trusted.edgert"
    proc = run_cli("export", evil, "-o", out, "--trust-pickle")
    assert proc.returncode == 0, proc.stderr
    assert marker.exists() and (out / "manifest.json").is_file()


def test_while_an_untrusted_archive_loads_torch_load_cannot_unpickle_code(tmp_path):
    """The second line of defence: a path the archive scan does not know still meets
    ``weights_only=True`` (torch's restricted unpickler), whatever its caller asked for."""
    from edgert.export.pt2 import _weights_only

    marker = tmp_path / "ran"
    blob = _pickled(_Payload(marker, "1"))
    with _weights_only(torch), pytest.raises(Exception, match="Weights only load failed"):
        torch.load(io.BytesIO(blob), weights_only=False)
    assert not marker.exists()
    assert torch.load(io.BytesIO(blob), weights_only=False) == 1 and marker.exists()
