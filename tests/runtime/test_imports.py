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
