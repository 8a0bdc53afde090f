#!/bin/bash
# The GPU half on a CUDA machine: the @pytest.mark.gpu tests and the GPU benchmarks, with their
# evidence (logs and JSON naming the GPU, driver, CUDA and PyCUDA) written to $OUT (default
# reports/gpu). Run from the repository root:
#   bash scripts/gpu-check.sh [WHEEL_DIR] [pytest args...]
# It installs exactly two things, both into a scratch folder (never the system): the wheels in
# WHEEL_DIR (default: none; PyCUDA and nvidia-ml-py built for that machine, for a machine without
# network) and this checkout without dependencies. Everything else (numpy, onnx, onnxruntime,
# opencv, pytest) must already be importable. Clocks and power limits are never changed.
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
WHEELS=${1:-}
[ $# -gt 0 ] && shift
OUT=${OUT:-reports/gpu}
mkdir -p "$OUT"
SITE=${TMPDIR:-/tmp}/edgert-gpu-site
rm -rf "$SITE"
if [ -n "$WHEELS" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$SITE" . || exit 1
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import pycuda, pycuda.driver as d; d.init(); print('PyCUDA', pycuda.VERSION_TEXT, 'CUDA driver', d.get_driver_version())" | tee -a "$OUT/nvidia-smi.txt"
# what only a device can answer (issue 37: tests/runtime/test_gpu_questions.py prints its
# observations; -rP keeps them in the log): the CUDA name, SM count and Jetson module a plan key
# holds, and the TensorRT questions where TensorRT is installed
python3 -c "import json; from edgert.runtime.device import jetson_module, probe_cuda; d = probe_cuda().devices[0]; print(json.dumps({'name': d.name, 'cc': d.cc, 'multiprocessors': d.multiprocessors, 'memory': d.total_memory, 'integrated': d.integrated, 'module': jetson_module()}))" | tee "$OUT/device-facts.json"
status=0
python3 -m pytest -m gpu -p no:cacheprovider -q -rP "$@" 2>&1 | tee "$OUT/gpu-tests.log" || status=1
python3 benchmarks/gpu_buffers.py --json "$OUT/gpu_buffers.json" || status=1
python3 benchmarks/power_cap_gpu.py --json "$OUT/power_cap_gpu.json" || status=1
exit $status
