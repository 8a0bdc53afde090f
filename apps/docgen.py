"""Generates docs/cli.md from the argument parsers (``python -m edgert.apps.docgen``).

A test regenerates it and fails when the committed file is stale.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HEADER = """# CLI reference

Generated from the argument parsers by `python -m edgert.apps.docgen > docs/cli.md`; a test fails
when this file is stale. Every command prints the same with `edgert COMMAND --help`.
"""


def render() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: fix the width for the docs
    from edgert.apps.cli import COMMANDS, build_parser

    parser = build_parser()
    parts = [HEADER, "## edgert\n\n```text\n" + parser.format_help().rstrip() + "\n```\n"]
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in COMMANDS:
        parts.append(
            f"## edgert {name}\n\n```text\n" + sub.choices[name].format_help().rstrip() + "\n```\n"
        )
    parts.append(ENVIRONMENT)
    return "\n".join(parts)


ENVIRONMENT = """## Environment variables

| variable | meaning | default |
|---|---|---|
| `EDGERT_CACHE_DIR` | where zoo weights and trained zoo models are cached | `~/.cache/edgert` |
| `EDGERT_ORT_THREADS` | ONNX Runtime intra-op threads when `Engine.load` is not given `intra_op_threads` (0: ONNX Runtime's choice) | `0` |
| `EDGERT_SYSFS_ROOT` | read power sensors under this folder instead of `/` (a container with the host's `/sys` mounted elsewhere); `--sysfs-root` wins | `/` |
| `EDGERT_PLAN_DIR` | TensorRT plans are cached in this folder's subfolder named by the bundle and the first 12 digits of its `model.onnx`'s SHA-256 (`detector.edgert-3fa2c81b09de`; the name-only subfolder of older releases is still read) instead of the bundle's `engines/` (a read-only bundle in a container, plans on the node's disk: the Helm chart's `hostPath`); a plan's file name is the digest of everything it depends on, so bundles, JetPack releases and modules never share one | the bundle's `engines/` |
| `EDGERT_PROGRESS_SECONDS` | `edgert build` writes a progress line (steps, n/N, the time left) after this many seconds without output | `10` |
| `EDGERT_MALLOC` | `system` leaves glibc's malloc as it is; otherwise `edgert camera` sets its mmap and trim thresholds (32 and 64 MB) so that a frame's arrays reuse the memory the last frame's gave back instead of page-faulting fresh memory from the kernel (`runtime/malloc.py`; nothing is changed when `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_` or `MALLOC_TOP_PAD_` is set, or off glibc) | thresholds set |
| `EDGERT_MAX_IMAGE_PIXELS` | images with more pixels are refused before decoding | `120000000` |
| `EDGERT_NAME` (any `EDGERT_…` name) | `${EDGERT_NAME}` in `edgert camera --source` or `--mqtt` is replaced by its value: a password kept out of the command line, where `ps` shows it to every local user (systemd's `EnvironmentFile=`, a container's secrets); only `EDGERT_` variables are read | |
| `DISPLAY`, `WAYLAND_DISPLAY` | `edgert camera` opens a window only when one is set (and `--headless` is not given) | |
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if argv and argv[0] == "--check":
        path = Path(argv[1])
        if path.read_text() != text:
            print(
                f"{path} is stale: regenerate with python -m edgert.apps.docgen > {path}",
                file=sys.stderr,
            )
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
