"""The CLI reference is generated from the parsers; it must not go stale."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.subprocess
def test_cli_reference_is_current():
    proc = subprocess.run(
        [sys.executable, "-m", "edgert.apps.docgen", "--check", str(ROOT / "docs" / "cli.md")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_docs_link_to_existing_files():
    import re

    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(((?!https?:)[^)#]+)\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"
