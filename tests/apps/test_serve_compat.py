"""The PyTriton adapter's version rule (pure; runs without PyTriton): edgert serve reaches into
PyTriton 0.7's private parts (apps/serve/pytriton_compat.py), so another release is one
sentence before anything starts, not an AttributeError mid-stop."""

from __future__ import annotations

import pytest

from edgert.apps.serve import pytriton_compat


@pytest.mark.parametrize("version", ["0.7.0", "0.7.1", "0.7.12"])
def test_the_pinned_pytriton_is_taken(version):
    assert pytriton_compat.unsupported(version) is None


@pytest.mark.parametrize("version", ["0.6.2", "0.8.0", "1.0", "x.y"])
def test_another_pytriton_is_one_sentence(version):
    why = pytriton_compat.unsupported(version)
    assert why is not None and "\n" not in why and version in why
