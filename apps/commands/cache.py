"""edgert cache: list or clear the TensorRT plans cached in a bundle."""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser(
        "cache",
        help="list or clear cached TensorRT plans (e.g. edgert cache list mobilenet_v2.edgert)",
        description="List or clear the TensorRT plans in a bundle's engines/ folder (or its "
        "folder under EDGERT_PLAN_DIR). clear removes only the bundle's own plans: never a link, "
        "a file without edgert's sidecar, or a plan built for another bundle.",
    )
    p.add_argument("action", choices=["list", "clear"])
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--key", help="clear only plans whose file name contains this key")
    p.add_argument("--json", action="store_true", help="print the plans (or those removed) as JSON")
    p.set_defaults(func=run)


def shown(text) -> str:
    """A path or name for the terminal: as it is when printable, else Python's escaped form
    (a newline or an escape sequence in EDGERT_PLAN_DIR or a file name is never printed raw)."""
    from edgert.runtime.errors import escape_controls

    return escape_controls(str(text))


def _caches(bundle) -> list:
    """The bundle's plan cache, and under EDGERT_PLAN_DIR the folder named as the bundle alone
    where an older edgert put its plans, when it exists (its plans of this bundle count too)."""
    from edgert.runtime.backends.plan_cache import PlanCache, cache_of
    from edgert.runtime.bundle import engines_dir

    cache = cache_of(bundle)
    legacy = engines_dir(bundle.path, legacy=True)
    if legacy is None or legacy == cache.dir or not legacy.is_dir():
        return [cache]
    return [cache, PlanCache(legacy, cache.owner)]


def run(args) -> int:
    from edgert.runtime import Bundle

    caches = _caches(Bundle(args.bundle))
    if args.action == "clear":
        removed, left = [], []
        for cache in caches:
            gone, kept = cache.clear(args.key)
            removed += gone
            left += kept
        if args.json:
            out = {"removed": [p.name for p in removed], "left": {p.name: why for p, why in left}}
            print(json.dumps(out, indent=2))
            return 0
        print(f"removed {len(removed)} plan(s)" + "".join(f"\n  {shown(p.name)}" for p in removed))
        if left:
            print(
                f"left {len(left)} file(s) that are not this bundle's plans"
                + "".join(f"\n  {shown(p.name)} ({why})" for p, why in left)
            )
        return 0
    entries = [e for cache in caches for e in cache.inspect()]
    if args.json:
        print(json.dumps([_entry(*e) for e in entries], indent=2))
        return 0
    if not entries:
        print(f"no TensorRT plans in {shown(caches[0].dir)}")
        return 0
    print(f"{'plan':<40}{'precision':>10}{'TensorRT':>12}  {'GPU':<24}{'MiB':>8}")
    for path, info, why, size in entries:
        name = shown(path.name)
        if info is None:
            print(f"{name:<40}{'?':>10}{'?':>12}  {'(' + why + ')':<24}{size / 2**20:>8.1f}")
        else:
            gpu = f"{info.device_name} ({info.compute_capability})"
            print(
                f"{name:<40}{info.precision:>10}{info.tensorrt:>12}  {gpu:<24}{size / 2**20:>8.1f}"
            )
    return 0


def _entry(path, info, why, size: int) -> dict:
    facts = {"plan": path.name, "bytes": size}
    if info is None:
        facts["problem"] = why
    else:
        facts.update(
            precision=info.precision,
            tensorrt=info.tensorrt,
            gpu=info.device_name,
            compute_capability=info.compute_capability,
            dla_core=info.dla_core,
        )
    return facts
