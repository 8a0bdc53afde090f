"""edgert export: PyTorch (or ONNX) model -> bundle folder, checked against PyTorch."""

from __future__ import annotations

import argparse
import sys

from edgert.apps.argtypes import finite_float, nonneg_float, positive_int
from edgert.runtime import json_text
from edgert.runtime.errors import ModelError
from edgert.runtime.tasks import TASK_SPECS

HELP = """MODEL is one of:
  zoo:mobilenet_v2 | zoo:digits_cnn     built-in trained models (no download)
  path/to/file.py:build                 a factory returning a torch.nn.Module (--weights loads a state_dict)
  package.module:build                  the same, from an importable module
  model.ts / model.pt                   TorchScript (torch.jit.save)
  model.pt2                             an ExportedProgram (torch.export.save); one holding
                                        pickled weights or compiled code needs --trust-pickle
  model.pt --trust-pickle               a pickled whole module (runs code from the file: trust it first)
  best.pt --trust-pickle                an Ultralytics checkpoint: exported to ONNX by Ultralytics
                                        (installed beside edgert) at --size, then read as below
  model.onnx (Ultralytics)              task, labels, size, letterbox, keypoints and head read
                                        from the metadata Ultralytics writes; flags given win
  model.onnx                            validated, shape-inferred and wrapped into a bundle

The default opset is 17, the newest that TensorRT 8.5 (JetPack 5) parses; TensorRT 10 (JetPack 6)
parses newer ones.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="PyTorch -> checked ONNX bundle (e.g. edgert export zoo:mobilenet_v2)",
        description="Export a trained model to an edgert bundle (manifest.json + model.onnx), "
        "checked against PyTorch with ONNX Runtime.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("-o", "--output", metavar="OUT", help="bundle folder (default ./NAME.edgert)")
    p.add_argument("--name", help="model name (default from MODEL)")
    p.add_argument(
        "--input-shape",
        metavar="1x3x224x224",
        help="example input shape; comma-separate several inputs",
    )
    p.add_argument(
        "--dynamic-batch", action="store_true", help="make axis 0 of inputs and outputs dynamic"
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        metavar="N",
        help="largest batch for engines (implies --dynamic-batch; default 32)",
    )
    p.add_argument(
        "--opset",
        type=positive_int,
        default=17,
        help="ONNX opset (default 17: TensorRT 8.5 / JetPack 5 parses up to 17)",
    )
    p.add_argument(
        "--weights", metavar="FILE", help="state_dict for a factory, loaded with weights_only=True"
    )
    p.add_argument("--no-simplify", action="store_true", help="skip onnxslim simplification")
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow loading a pickle (runs code from the file): a whole module, an Ultralytics "
        "checkpoint, a .pt2 whose archive holds pickled parts or compiled code",
    )
    p.add_argument(
        "--allow-trace-warnings",
        action="store_true",
        help="export even when the tracer warns that data-dependent control flow was fixed "
        "(the warnings are printed instead)",
    )
    p.add_argument(
        "--atol", type=nonneg_float, default=1e-4, help="parity absolute tolerance (default 1e-4)"
    )
    p.add_argument(
        "--rtol", type=nonneg_float, default=1e-3, help="parity relative tolerance (default 1e-3)"
    )
    _uint8_argument(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    _description_arguments(p)
    p.set_defaults(func=run)


def _uint8_argument(p) -> None:
    p.add_argument(
        "--uint8-input",
        action="store_true",
        help="the model takes uint8 pixels and normalises them in its graph (scale, mean and std "
        "become its first nodes; checked against the float model on real photos): the runtime "
        "writes a quarter of the bytes a frame and does no arithmetic, the engine does it",
    )


def _description_arguments(p) -> None:
    """The model's description for models other than the zoo's: task, labels, outputs and
    preprocessing."""
    d = p.add_argument_group(
        "description (for models other than the zoo's; an Ultralytics ONNX brings its own, which "
        "these override)"
    )
    d.add_argument(
        "--task",
        choices=[t.name for t in TASK_SPECS.values() if t.export_option],
        help="what the outputs mean",
    )
    d.add_argument(
        "--labels", metavar="FILE", help="class names: a text file (one per line) or a JSON list"
    )
    _outputs_arguments(d)
    d.add_argument(
        "--resize",
        choices=["stretch", "letterbox", "resize_crop", "none"],
        help="how images are fitted to the input",
    )
    d.add_argument("--size", metavar="HxW", help="input image size (default: from the input shape)")
    d.add_argument(
        "--resize-short",
        type=positive_int,
        metavar="N",
        help="shorter side before the centre crop (resize_crop)",
    )
    d.add_argument("--interpolation", choices=["linear", "bilinear", "nearest", "area", "cubic"])
    d.add_argument("--channel-order", choices=["RGB", "BGR", "GRAY"])
    d.add_argument(
        "--scale", type=finite_float, help="pixel multiplier before mean/std (default 1/255)"
    )
    d.add_argument("--mean", metavar="M,M,M", help="per-channel mean after scaling")
    d.add_argument("--std", metavar="S,S,S", help="per-channel std after scaling")


def _outputs_arguments(d) -> None:
    """What a model's outputs are beyond its task: a pose head's keypoints, an encoder's layer."""
    d.add_argument(
        "--keypoints",
        metavar="KxD",
        help="a pose model's keypoints: K of D values (2: x, y; 3: with visibility), e.g. 17x3",
    )
    d.add_argument(
        "--embed-layer",
        metavar="NAME",
        help="cut the model at this layer into an encoder (--task embed): an ONNX tensor's name, "
        "or a PyTorch module's (model.named_modules(), e.g. classifier.0)",
    )
    d.add_argument(
        "--text-tower",
        metavar="TEXT.onnx",
        help="a CLIP-style text tower beside this image tower (--task embed): token ids int64 "
        "[1, L] -> one vector of the image tower's size; needs --tokenizer",
    )
    d.add_argument(
        "--tokenizer", metavar="tokenizer.json", help="the text tower's HF tokenizers file"
    )
    d.add_argument(
        "--context-length",
        type=int,
        metavar="L",
        help="the text tower's token count (default: its graph's)",
    )
    d.add_argument(
        "--pad-id",
        type=int,
        metavar="ID",
        help="the padding token's id (default: the tokenizer's <pad>, else its end token)",
    )
    d.add_argument(
        "--end-id",
        type=int,
        metavar="ID",
        help="the end token's id, kept last when a text is cut (default: the special token the "
        "tokenizer appends, e.g. <|endoftext|> or </s>; -1 none)",
    )


def run(args) -> int:
    if sys.version_info < (3, 10):
        from edgert.runtime.errors import MissingDependency

        here = ".".join(map(str, sys.version_info[:3]))
        raise MissingDependency(
            f"edgert export runs on the host and needs Python 3.10 or newer (this is {here}): "
            "export on a PC with PyTorch, then copy the bundle to the device"
        )
    from edgert.export import export_model

    result = export_model(
        args.model,
        args.output,
        name=args.name,
        input_shape=args.input_shape,
        dynamic_batch=args.dynamic_batch,
        max_batch=args.max_batch,
        opset=args.opset,
        weights=args.weights,
        simplify=not args.no_simplify,
        trust_pickle=args.trust_pickle,
        allow_trace_warnings=args.allow_trace_warnings,
        atol=args.atol,
        rtol=args.rtol,
        task=args.task,
        labels=args.labels,
        keypoints=args.keypoints,
        preprocess={
            "resize": args.resize,
            "size": args.size,
            "resize_short": args.resize_short,
            "interpolation": args.interpolation,
            "channel_order": args.channel_order,
            "scale": args.scale,
            "mean": args.mean,
            "std": args.std,
        },
        embed_layer=args.embed_layer,
        text_tower=_text_tower(args),
        uint8_input=args.uint8_input,
    )
    if args.json:
        print(
            json_text.dumps(
                {
                    "bundle": str(result.bundle),
                    "seconds": round(result.seconds, 3),
                    "parity": result.parity.to_dict(),
                }
            )
        )
        return 0
    _say(args, result)
    return 0


def _text_tower(args):
    """The text tower's arguments, or None; ModelError when one of the pair is missing."""
    if args.text_tower is None and args.tokenizer is None:
        if any(getattr(args, k) is not None for k in ("context_length", "pad_id", "end_id")):
            raise ModelError("--context-length, --pad-id and --end-id go with --text-tower")
        return None
    if args.text_tower is None or args.tokenizer is None:
        raise ModelError("--text-tower and --tokenizer go together (the tower and its tokenizer)")
    from edgert.export.text_tower import TextTowerArgs

    return TextTowerArgs(
        args.text_tower, args.tokenizer, args.context_length, args.pad_id, args.end_id
    )


def _say(args, result) -> None:
    """What was exported: the bundle, its description, inputs and outputs, onnxslim's count, the
    parity check, and PyTorch's test accuracy where the zoo measured it."""
    m = result.manifest
    print(f"exported {args.model} -> {result.bundle} in {result.seconds:.1f} s")
    for line in m["export"].get("described") or []:
        print(f"  {line}")
    for word, spec in [("input ", s) for s in m["inputs"]] + [("output", s) for s in m["outputs"]]:
        print(f"  {word} {spec['name']}: {spec['dtype']} {spec['shape']}")
    simp = m["export"].get("simplify", {})
    if simp.get("applied"):
        print(f"  onnxslim: {simp['nodes_before']} -> {simp['nodes']} nodes")
    for line in result.parity.lines():
        print(line)
    folded = m["export"].get("uint8_input")
    if folded:
        f = folded["folded"]
        print(
            f"uint8 input: the model normalises its pixels ((x * {f['scale']:.6g} - mean) / std "
            f"in {f['dtype']}); checked on real photos against the float model, max abs error "
            f"{folded['parity']['max_abs']:.3e}"
        )
    if "test_accuracy" in m.get("metrics", {}):
        print(f"  test accuracy (PyTorch): {m['metrics']['test_accuracy']:.4f}")
