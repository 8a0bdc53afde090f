"""edgert info: what this machine offers (Python, ONNX Runtime providers, torch, CUDA, TensorRT)."""

from __future__ import annotations

from edgert.runtime import json_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "info",
        help="what this machine offers (e.g. edgert info --json)",
        description="Show Python, ONNX Runtime providers, PyTorch, CUDA devices, TensorRT and Jetson "
        "facts; anything absent is shown with the reason.",
    )
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=run)


def _line(label: str, value: str) -> str:
    return f"  {label:<22} {value}"


def run(args) -> int:
    from edgert.apps.camera.media import decoders
    from edgert.runtime.device import edgert_version, machine_summary

    facts = machine_summary()
    facts["edgert"] = edgert_version()
    facts["decoders"] = decoders()
    if args.json:
        print(json_text.dumps(facts, indent=2))
        return 0
    print(f"edgert {facts['edgert']} on Python {facts['python']} ({facts['platform']})")
    for name, label in (
        ("numpy", "numpy"),
        ("onnx", "onnx"),
        ("onnxruntime", "onnxruntime"),
        ("cv2", "opencv"),
        ("torch", "torch"),
        ("tensorrt", "TensorRT"),
        ("pycuda", "PyCUDA"),
        ("pynvml", "NVML (nvidia-ml-py)"),
    ):
        item = facts[name]
        print(_line(label, item["version"] or f"absent: {item['reason']}"))
    print(_line("ONNX Runtime providers", ", ".join(facts["onnxruntime_providers"]) or "none"))
    cuda = facts["cuda"]
    if cuda["devices"]:
        for d in cuda["devices"]:
            kind = "integrated" if d["integrated"] else "discrete"
            print(
                _line(
                    f"CUDA device {d['index']}",
                    f"{d['name']} (compute {d['compute_capability']}, {d['memory_gib']} GiB, {kind}; driver {cuda['driver']})",
                )
            )
    else:
        print(_line("CUDA", f"absent: {cuda['reason']}"))
    jetson = facts["jetson"]
    print(
        _line(
            "Jetson",
            f"{jetson.get('model', 'unknown board')}, {jetson['l4t']}"
            if jetson
            else "no (not a Jetson: /etc/nv_tegra_release absent)",
        )
    )
    print_decoders(facts["decoders"])
    return 0


def print_decoders(d: dict) -> None:
    g = d["gstreamer"]
    print(_line("GStreamer", g["version"] if g["available"] else f"absent: {g['reason']}"))
    print(_line("hardware decoder", d["hardware_decoder"] or "none (decoding on the CPU)"))
    print(_line("rtsp:// decoder", d["rtsp"]["decoder"]))
    if d["rtsp"]["pipeline_h264"]:
        print(_line("  H.264 pipeline", d["rtsp"]["pipeline_h264"]))
        print(_line("  H.265 pipeline", d["rtsp"]["pipeline_h265"]))
    print(_line("video file decoder", d["files"]["decoder"]))
    if d["files"]["pipeline"]:
        print(_line("  pipeline", d["files"]["pipeline"]))
    out = d.get("rtsp_output")
    if out:
        print(_line("rtsp:// output encoder", f"{out['encoder'] or 'none'} ({out['why']})"))
        if out["pipeline"]:
            print(_line("  pipeline", "appsrc ! " + out["pipeline"]))
