"""``edgert bench``: latency, throughput, power and energy per inference, optionally power-capped,
and sweeps over precision / batch / power cap / clocks with a Pareto view of latency vs energy.

A package along its seams: ``config`` (what a run is asked), ``loop`` (the timed loop),
``points`` (operating points under a cap or at a rate), ``clocks`` (``--clocks auto``, shared with
the camera), ``run`` (one run and its report) and ``sweep``."""

from .clocks import ClockSearch, RateHold, choose_clocks, clock_session, fixed_clocks
from .config import BenchConfig, device_facts, make_inputs, validate
from .loop import Run, engine_time, timed_loop, warm
from .points import choose_operating_point, operating_points
from .run import run_bench
from .sweep import CLOCK_AXES, SWEEP_KEYS, conditions_mismatch, pareto, parse_sweep, run_sweep

__all__ = [
    "CLOCK_AXES",
    "SWEEP_KEYS",
    "BenchConfig",
    "ClockSearch",
    "RateHold",
    "Run",
    "choose_clocks",
    "choose_operating_point",
    "clock_session",
    "conditions_mismatch",
    "device_facts",
    "engine_time",
    "fixed_clocks",
    "make_inputs",
    "operating_points",
    "pareto",
    "parse_sweep",
    "run_bench",
    "run_sweep",
    "timed_loop",
    "validate",
    "warm",
]
