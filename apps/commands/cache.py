"""edgert cache: list or clear the TensorRT plans cached in a bundle."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "cache",
        help="list or clear cached TensorRT plans (e.g. edgert cache list mobilenet_v2.edgert)",
        description="List or clear the TensorRT plans in a bundle's engines/ folder.",
    )
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--key", help="clear only plans whose file name contains this key")
    p.add_argument("--json", action="store_true", help="print the plans (or those removed) as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.runtime import Bundle
    from edgert.runtime.plan_cache import PlanCache

    cache = PlanCache(Bundle(args.bundle).engines_dir)
    if args.action == "clear":
        removed = cache.clear(args.key)
        if args.json:
            print(json.dumps({"removed": [p.name for p in removed]}, indent=2))
        else:
            print(f"removed {len(removed)} plan(s)" + "".join(f"\n  {p.name}" for p in removed))
        return 0
    entries = cache.entries()
    if args.json:
        print(json.dumps([_entry(path, info, size) for path, info, size in entries], indent=2))
        return 0
    if not entries:
        print(f"no TensorRT plans in {cache.dir}")
        return 0
    print(f"{'plan':<40}{'precision':>10}{'TensorRT':>12}  {'GPU':<24}{'MiB':>8}")
    for path, info, size in entries:
        if info is None:
            print(f"{path.name:<40}{'?':>10}{'?':>12}  {'(no sidecar)':<24}{size / 2**20:>8.1f}")
        else:
            gpu = f"{info.device_name} ({info.compute_capability})"
            print(
                f"{path.name:<40}{info.precision:>10}{info.tensorrt:>12}  {gpu:<24}{size / 2**20:>8.1f}"
            )
    return 0


def _entry(path, info, size: int) -> dict:
    facts = {"plan": path.name, "bytes": size}
    if info is not None:
        facts.update(
            precision=info.precision,
            tensorrt=info.tensorrt,
            gpu=info.device_name,
            compute_capability=info.compute_capability,
            dla_core=info.dla_core,
        )
    return facts
