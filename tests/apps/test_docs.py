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


def test_the_tours_input_files_exist():
    """Issue 73: the README's tour ran `edgert run mv2.edgert cat.jpg`, and there was no cat.jpg. A
    picture a command of the README's or the quickstart's code blocks reads (not one it writes:
    -o, --output, --plot, ... name outputs) is in the repository."""
    import re

    media = re.compile(r"^[\w./-]+\.(jpg|jpeg|png)$")
    writes = {"-o", "--output", "--plot", "--json", "--repo", "--jsonl", "--events", "--report"}
    for doc in [ROOT / "README.md", ROOT / "docs" / "quickstart.md"]:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S):
            for line in block.splitlines():
                words = line.split("#")[0].split()
                if words[:1] != ["edgert"]:
                    continue
                for before, word in zip(words, words[1:], strict=False):
                    if media.match(word) and before not in writes and "://" not in word:
                        assert (ROOT / word).exists(), f"{doc.name}: `{line.strip()}` reads {word}"
