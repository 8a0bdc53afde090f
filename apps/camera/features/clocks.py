"""``--clocks auto``: the GPU / EMC limits with the least energy per frame at ``--target-fps``
frames a second per stream, measured on the model before the streams start (as ``edgert bench
--target-fps --clocks auto`` does), held for the run and put back at its end."""

from __future__ import annotations

from edgert.runtime.errors import SourceError

from .base import Feature, Run


class Clocks(Feature):
    """The clock session and its choice."""

    name = "clocks"
    section = "clocks"
    help_rank = 70
    needs = ("power",)  # measures with the power session's meter (opened before any load)

    @staticmethod
    def add_arguments(parser) -> None:
        parser.add_argument(
            "--clocks",
            choices=["auto"],
            help="Jetson, with --target-fps: before the streams start, choose the GPU clock limit "
            "and the EMC cap with the least measured energy per frame at the rate (as edgert "
            "bench --clocks auto); put back at exit (after a crash: edgert power --restore)",
        )

    @staticmethod
    def from_args(args):
        return args.clocks

    def check(self, run: Run) -> None:
        if run.cfg.clocks is not None and run.cfg.gate.target_fps is None:
            raise SourceError(
                "--clocks auto chooses clocks for a rate: give --target-fps N as well"
            )

    def loaded(self, run: Run) -> None:
        cfg = run.cfg
        if cfg.clocks is None:
            return
        from edgert.apps.bench import BenchConfig, choose_clocks, clock_session

        m = cfg.model
        bench = BenchConfig(
            str(m.path),
            batch=run.batch,
            precision=m.precision,
            backend=m.backend,
            target_fps=sum(cfg.gate.for_stream(i).target_fps for i in range(len(run.sources))),
            sysfs_root=cfg.power.sysfs_root,
            clocks="auto",
        )
        session = run.stack.enter_context(clock_session(bench, run.say))
        run.say(f"clocks: measuring the clock points at {bench.target_fps:g} frames/s in all")
        choice = choose_clocks(bench, session, run.power.meter, {"spin": False}, run.say)
        choice.pop("key")
        run.clocks = (session, choice)

    def report(self, run: Run, summary: dict) -> None:
        if run.clocks is not None:
            summary["clocks_set"], summary["clock_choice"] = run.clocks[0].report(), run.clocks[1]
