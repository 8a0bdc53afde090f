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
# a one-class detector (a bright 24-pixel square: mean brightness under 24-pixel anchors every
# 4 pixels, a YOLOv8 head) and a video of a square crossing the middle left to right
import cv2
ys, xs = np.meshgrid(np.arange(24), np.arange(32), indexing="ij")
boxes = np.stack([(xs + 1.0) * 4, (ys + 1.0) * 4, np.full(xs.shape, 24.0),
                  np.full(xs.shape, 24.0)]).reshape(1, 4, -1).astype(np.float32)
det = helper.make_graph(
    [helper.make_node("ReduceMean", ["x"], ["g"], axes=[1], keepdims=1),
     helper.make_node("AveragePool", ["g"], ["c"], kernel_shape=[4, 4], strides=[4, 4]),
     helper.make_node("AveragePool", ["c"], ["a"], kernel_shape=[6, 6], pads=[2, 2, 3, 3]),
     helper.make_node("Reshape", ["a", "flat"], ["s"]),
     helper.make_node("Concat", ["boxes", "s"], ["output0"], axis=1)],
    "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 96, 128])],
    [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 5, 768])],
    initializer=[helper.make_tensor("boxes", TensorProto.FLOAT, boxes.shape, boxes.ravel()),
                 helper.make_tensor("flat", TensorProto.INT64, [3], [1, 1, 768])])
onnx.save(helper.make_model(det, opset_imports=[helper.make_opsetid("", 17)]), "det.onnx")
open("det.txt", "w").write("blob\n")
video = cv2.VideoWriter("walk.mp4", cv2.VideoWriter_fourcc(*"mp4v"), 10, (320, 240))
for i in range(60):
    frame = np.zeros((240, 320, 3), np.uint8)
    x = 10 + 4 * i
    frame[90:150, x : x + 60] = 255
    video.write(frame)
video.release()
# a YOLO-style detector with weights (a stem, a box and a class branch joined into the output: a
# head edgert build keeps out of INT8) and a folder of calibration images with YOLO txt labels
def conv(name, inp, out, w, **kw):
    return helper.make_node("Conv", [inp, name], [out], **kw), helper.make_tensor(
        name, TensorProto.FLOAT, w.shape, w.ravel())
nodes, inits = [], []
for args in (("ws", "x", "h0", rng.standard_normal((8, 3, 3, 3)) * 0.3, dict(strides=[2, 2], pads=[1] * 4)),
             ("wb", "h", "b", rng.standard_normal((4, 8, 1, 1)) * 0.3, {}),
             ("wc", "h", "c", rng.standard_normal((1, 8, 1, 1)) * 0.3, {})):
    n, i = conv(*args[:4], **args[4])
    nodes.append(n), inits.append(i)
nodes[1:1] = [helper.make_node("Relu", ["h0"], ["h"])]
nodes += [helper.make_node("Sigmoid", ["b"], ["bs"]), helper.make_node("Mul", ["bs", "px"], ["bp"]),
          helper.make_node("Sigmoid", ["c"], ["cs"]), helper.make_node("Concat", ["bp", "cs"], ["y"], axis=1),
          helper.make_node("Reshape", ["y", "shape"], ["output0"])]
inits += [helper.make_tensor("px", TensorProto.FLOAT, [], [64.0]),
          helper.make_tensor("shape", TensorProto.INT64, [3], [1, 5, 1024])]
yolo = helper.make_graph(nodes, "yolo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                         [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 5, 1024])],
                         initializer=[i for i in inits])
onnx.save(helper.make_model(yolo, opset_imports=[helper.make_opsetid("", 17)]), "yolo.onnx")
import os
os.makedirs("cal")
for i in range(50):
    cv2.imwrite(f"cal/{i:02d}.jpg", rng.integers(0, 256, (48, 64, 3), np.uint8))
    open(f"cal/{i:02d}.txt", "w").write("0 0.5 0.5 0.4 0.5\n")
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
edgert export det.onnx -o det.edgert --task detect --labels det.txt --size 96x128 --resize stretch
edgert camera det.edgert --source walk.mp4 --headless --conf 0.75 --line door=160,0,160,240 --events events.jsonl --json > track.json
python -c "import json; c = json.load(open('track.json'))['streams'][0]['counts']['door']; assert (c['in'], c['out']) == (1, 0), c"
grep -q line_cross events.jsonl
# a second stage on the tracks: the classifier on the walker's crops, its label in the events
edgert camera det.edgert --source walk.mp4 --headless --conf 0.75 --secondary smoke.edgert:name=kind --events sec-events.jsonl --json > sec.json
python -c "import json; r = json.load(open('sec.json'))['secondary'][0]; assert r['name'] == 'kind' and r['calls'] >= 1 and 1 <= r['most_attempts'] <= 3, r; e = [json.loads(x) for x in open('sec-events.jsonl')]; assert any(x['event'] == 'track_label' and x['secondary'] == 'kind' for x in e), e"
# INT8 for a detector from the wheel: the head kept out by rule, mAP against the labels beside
# the images (gate off: random weights), recorded in the manifest
edgert export yolo.onnx -o yolo.edgert --task detect --labels det.txt --size 64x64 --resize letterbox
edgert build yolo.edgert --precision int8 --calib cal --calib-labels cal --calib-size 30 --holdout-size 20 --prepare none --gate off --no-engine
python -c "import json; q = json.load(open('yolo.edgert/manifest.json'))['quantization']['int8']; assert len(q['head']['nodes']) == 2, q['head']; assert q['holdout']['labelled_samples'] == 10 and 'labels_map50_95_fp32' in q['holdout'] and 0 < q['macs_share'] < 1, q"
# event-gated inference: the same count, the frames the gate skipped predicted by the tracker
edgert camera det.edgert --source walk.mp4 --headless --conf 0.75 --line door=160,0,160,240 --gate motion --json > gated.json
python -c "import json; s = json.load(open('gated.json'))['streams'][0]; c, g = s['counts']['door'], s['gate']; assert (c['in'], c['out']) == (1, 0) and g['inferred'] + g['skipped'] == 60 and g['skipped'] > 0, s"
# the site file from the wheel (pydantic, PyYAML): a command line written as a file, checked, run
edgert camera det.edgert --source walk.mp4 --headless --conf 0.75 --line door=160,0,160,240 --print-config > site.yaml
edgert config check site.yaml
edgert camera --config site.yaml --json > site.json
python -c "import json; c = json.load(open('site.json'))['streams'][0]['counts']['door']; assert (c['in'], c['out']) == (1, 0), c"
edgert config schema -o site.schema.json && test -s site.schema.json
# the event store beside the snapshots, read without a camera; the page's history script shipped
edgert camera --config site.yaml --snapshots snaps --json > stored.json 2> refused.txt && exit 1
grep -q "with --config" refused.txt
edgert camera det.edgert --source walk.mp4 --headless --conf 0.75 --line door=160,0,160,240 --snapshots snaps --json > stored.json
edgert events query snaps/.edgert/events.db --line door --json > query.json
python -c "import json; e = json.load(open('query.json'))['events']; assert [x['kind'] for x in e] == ['line_cross'] and e[0]['config_version'], e"
python -c "import pathlib, edgert.apps.camera.sinks as s; assert (pathlib.Path(s.__file__).parent / 'viewer_history.js').is_file()"
if edgert events query "postgresql://edgert@127.0.0.1:9/events" 2> nopg.txt; then exit 1; fi
grep -q "pip install 'edgert\[postgres\]'" nopg.txt
# text search (the text extra): a CLIP-style pair in miniature (an image tower of mean colours, a
# word-level tokenizer and a text tower of the image tower's size) exported, run as the camera's
# embedder into a store, and the store searched by text without a camera
if edgert events query snaps/.edgert/events.db --text walker --bundle smoke.edgert 2> notext.txt; then exit 1; fi
grep -q "carries no text tower" notext.txt
python -m pip install -q "$wheel[text]"
python - <<'PY'
import numpy as np, onnx
from onnx import TensorProto, helper
from tokenizers import Tokenizer, models, pre_tokenizers
image = helper.make_graph(
    [helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[16, 16], strides=[16, 16]),
     helper.make_node("Sub", ["p", "grey"], ["c"]), helper.make_node("Flatten", ["c"], ["v"])],
    "image", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
    [helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", 12])],
    initializer=[helper.make_tensor("grey", TensorProto.FLOAT, [], [0.45])])
onnx.save(helper.make_model(image, opset_imports=[helper.make_opsetid("", 17)]), "image.onnx")
vocab = {"<pad>": 0, "</s>": 1, "[UNK]": 2, "a": 3, "walker": 4, "car": 5}
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save("tokenizer.json")
table = np.random.default_rng(1).standard_normal((len(vocab), 12)).astype(np.float32)
text = helper.make_graph(
    [helper.make_node("Gather", ["table", "ids"], ["e"]),
     helper.make_node("ReduceMean", ["e"], ["t"], axes=[1], keepdims=0)],
    "text", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
    [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 12])],
    initializer=[helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.ravel())])
onnx.save(helper.make_model(text, opset_imports=[helper.make_opsetid("", 13)]), "text.onnx")
PY
edgert export image.onnx -o pair.edgert --task embed --size 32x32 --resize stretch --text-tower text.onnx --tokenizer tokenizer.json
edgert camera det.edgert --source walk.mp4 --headless --conf 0.75 --secondary pair.edgert --store pair.db --json > pair.json
edgert events query pair.db --text "a walker" --bundle pair.edgert --json > text.json
python -c "import json; r = json.load(open('text.json')); assert r['model'] == 'pair' and r['results'] and -1 <= r['results'][0]['similarity'] <= 1, r"
# telemetry: without the extra a sentence naming it; with it, a scrape of the running camera
if edgert camera smoke.edgert --metrics 127.0.0.1:0 --duration 1 --headless 2> nometrics.txt; then exit 1; fi
grep -q "pip install 'edgert\[telemetry\]'" nometrics.txt
python -m pip install -q "$wheel[telemetry]"
port=$(python -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
edgert camera smoke.edgert --source synthetic:// --duration 8 --headless --metrics "127.0.0.1:$port" > metrics-run.txt &
python - "$port" <<'PY'
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(100):
    try:
        if urllib.request.urlopen(url + "/ready", timeout=1).status == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
text = urllib.request.urlopen(url + "/metrics", timeout=2).read().decode()
assert 'edgert_frames_processed_total{stream="0"}' in text and "edgert_build_info" in text, text[:500]
PY
wait
edgert cache list smoke.edgert
edgert export-triton smoke.edgert --repo triton-repo
test -f triton-repo/smoke/config.pbtxt -a -f triton-repo/smoke/1/model.onnx
set +x
echo "wheel smoke test passed: $(basename "$wheel")"
