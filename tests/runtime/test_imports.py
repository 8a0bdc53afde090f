import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess


def test_runtime_import_pulls_in_nothing_heavy():
    code = (
        "import sys, edgert.runtime, edgert.runtime.engine, edgert.runtime.device, edgert.runtime.tasks.postprocess\n"
        "import edgert.runtime.tasks.detection, edgert.runtime.tasks.faces, edgert.runtime.backends.plan_cache\n"
        "import edgert.runtime.power.sensors, edgert.runtime.power.meter, edgert.runtime.power.governor\n"
        "import edgert.runtime.cuda.memory, edgert.runtime.cuda.graph, edgert.runtime.backends.tensorrt\n"
        "heavy = [m for m in ('torch', 'tensorrt', 'pycuda', 'pynvml', 'onnxslim', 'sklearn') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_runtime_imports_nothing_from_other_edgert_packages():
    code = (
        "import sys, edgert.runtime, edgert.runtime.engine, edgert.runtime.device\n"
        "print(','.join(m for m in sys.modules if m.startswith(('edgert.export', 'edgert.quantize', 'edgert.apps'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_names_the_readme_and_docs_show_still_import_from_where_they_show():
    """Modules moved into rooms (issue 67): every edgert import in the README's and the docs'
    Python examples still works as written (the README imports ``classify`` from the runtime's
    postprocess module, which moved into tasks/ and left its names where they were)."""
    import re

    from tests.conftest import ROOT

    shown = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            shown += re.findall(
                r"^(?:from edgert[\w.]* import [\w, ]+|import edgert[\w.]*)$", block, re.M
            )
    assert any("postprocess" in line for line in shown), shown
    out = subprocess.run(
        [sys.executable, "-c", "\n".join(shown)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
