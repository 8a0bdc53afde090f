"""What the commands print about a run that is not their own business: the conditions the board
ran at (temperatures, clocks, mode, throttling), shared by ``edgert bench`` and ``edgert camera``."""

from __future__ import annotations

from edgert.runtime.power.thermal import NOT_THE_DIE


def print_conditions(c: dict | None, say=print) -> None:
    """The conditions block: temperatures (start -> end, peak), clocks (range vs limit), mode,
    and throttling with its intervals."""
    if not c or not (c["zones"] or c["clocks"]):
        return
    start = {z["name"]: z["temp_c"] for z in (c["start"] or {}).get("zones", [])}
    end = {z["name"]: z["temp_c"] for z in (c["end"] or {}).get("zones", [])}
    die = {n: v for n, v in c["zones"].items() if n not in NOT_THE_DIE}
    hot = sorted(die.items(), key=lambda kv: -kv[1]["max_c"])[:3]
    if hot:

        def temp(v) -> str:
            return "n/a" if v is None else f"{v:.1f}"

        say(
            "heat       "
            + ", ".join(
                f"{n} {temp(start.get(n))} -> {temp(end.get(n))} °C (peak {v['max_c']:.1f})"
                for n, v in hot
            )
        )
    for name, v in c["clocks"].items():
        limit = f" of {v['limit_mhz']:.0f}" if v["limit_mhz"] else ""
        say(f"clock      {name} {v['min_mhz']:.0f}-{v['max_mhz']:.0f}{limit} MHz")
    mode = f"nvpmodel {c['nvpmodel']}" if c["nvpmodel"] else "no nvpmodel"
    pinned = {True: "pinned (jetson_clocks)", False: "not pinned", None: "unknown"}[
        c["jetson_clocks"]
    ]
    say(f"mode       {mode}; clocks {pinned}")
    for t in c["throttling"]:
        why = ", ".join(
            [
                *(
                    f"{n[:-6]}'s limit lowered"
                    if n.endswith(" limit")
                    else f"{n} below its maximum"
                    for n in t["clocks"]
                ),
                *(f"{n} past its passive trip" for n in t["zones"]),
            ]
        )
        say(f"THROTTLED  {t['from_s']:.1f}-{t['to_s']:.1f} s: {why}")
