#!/bin/bash
# What users install is what we test: build the wheel from this checkout, compare it with the tree,
# install it (not editable) into a fresh virtual environment with only the core dependencies, and
# run every device-side command once from another folder. Fails on a missing package or data file.
#   bash scripts/wheel-smoke.sh            (PYTHON=python3.X to pick the interpreter)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== wheel"
"$PYTHON" -m pip wheel -q --no-deps -w "$work/dist" "$here"
wheel=$(ls "$work"/dist/edgert-*.whl)
"$PYTHON" "$here/scripts/check_wheel.py" "$wheel"
echo "== fresh environment with the core dependencies only"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel"
export PATH="$work/venv/bin:$PATH" EDGERT_CACHE_DIR="$work/cache"
cd "$work"  # another folder: nothing from the checkout is importable here
python - <<'PY'
import edgert.runtime, sys
assert "torch" not in sys.modules and "/venv/" in edgert.runtime.__file__, edgert.runtime.__file__
import numpy as np, onnx
from onnx import TensorProto, helper
rng = np.random.default_rng(0)
cw = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.2
gw = rng.standard_normal((3, 4)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
     helper.make_node("Relu", ["c"], ["r"]),
     helper.make_node("GlobalAveragePool", ["r"], ["g"]),
     helper.make_node("Flatten", ["g"], ["f"]),
     helper.make_node("Gemm", ["f", "gw"], ["logits"], transB=1)],
    "smoke", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])],
    initializer=[helper.make_tensor("cw", TensorProto.FLOAT, cw.shape, cw.ravel()),
                 helper.make_tensor("gw", TensorProto.FLOAT, gw.shape, gw.ravel())])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "smoke.onnx")
open("labels.txt", "w").write("cat\ndog\nbird\n")
PY
photo=$(python -c "from edgert.runtime.sample_data import photo_path; print(photo_path('chelsea'))")
set -x
edgert --version
edgert export smoke.onnx -o smoke.edgert --task classify --labels labels.txt --size 32x32 --resize resize_crop
edgert info
edgert power --json
edgert run smoke.edgert "$photo" --top-k 2
edgert bench smoke.edgert --iterations 50 --warmup 0 --idle-seconds 0
edgert camera smoke.edgert --source synthetic:// --duration 3 --headless --jsonl frames.jsonl
test -s frames.jsonl
edgert camera smoke.edgert --source synthetic:// --source "$photo" --loop --duration 3 --headless --jsonl streams.jsonl
python -c "import json; h = json.loads(open('streams.jsonl').readline()); assert len(h['streams']) == 2, h"
edgert cache list smoke.edgert
edgert export-triton smoke.edgert --repo triton-repo
test -f triton-repo/smoke/config.pbtxt -a -f triton-repo/smoke/1/model.onnx
set +x
echo "wheel smoke test passed: $(basename "$wheel")"
