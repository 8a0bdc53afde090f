"""How ``edgert camera`` and ``edgert serve`` take a new model while running: the options
(``--watch-model``, ``--model-endpoint``, ``--allow-models``, ``--swap-check``, and the camera's
``--check-against`` and rollback window), parsed into :class:`SwapOptions`. Apart from the swap
machinery (:mod:`.core`) so that the commands' parsers need none of it."""

from __future__ import annotations

from dataclasses import dataclass

from edgert.runtime.errors import ModelError


@dataclass(frozen=True)
class SwapOptions:
    """How a running camera takes a new model (see the module's text)."""

    watch: bool = False  # --watch-model: the bundle path polled for a change
    endpoint: bool = False  # --model-endpoint: POST /model
    allow: tuple = ()  # --allow-models: folders POST /model may name (default: the bundle's)
    check: bool = False  # --swap-check
    check_frames: int = 20
    min_agreement: float = 0.9  # classifiers: top-1 agreement
    min_box_f1: float = 0.8  # detectors: box F1
    rollback_s: float = 30.0  # 0: no watch after a swap
    rollback_below: float = 0.5
    poll_s: float = 2.0
    against: str | None = None  # --check-against: start on this bundle, ready once MODEL passed

    @staticmethod
    def add_arguments(
        parser,
        what: str = "the bundle path",
        port: str = "the --metrics / web viewer port",
        sample: str = "live frames",
        rollback: bool = True,
    ) -> None:
        g = parser.add_argument_group(f"model hot-swap (SIGHUP always re-reads {what})")
        g.add_argument(
            "--watch-model",
            action="store_true",
            help=f"swap to the bundle at {what} whenever it changes (polled every 2 s)",
        )
        g.add_argument(
            "--model-endpoint",
            action="store_true",
            help=f'POST /model {{"bundle": PATH}} on {port} swaps to that '
            "bundle (off unless given; GET /model says what runs)",
        )
        g.add_argument(
            "--allow-models",
            action="append",
            default=[],
            metavar="DIR",
            help="a folder whose bundles POST /model may name (repeatable; default: the "
            "running bundles' folders)",
        )
        g.add_argument(
            "--swap-check",
            action="store_true",
            help=f"run a candidate on {sample} beside the model in use and promote it only "
            "when they agree (top-1 agreement >= 0.9, box F1 >= 0.8)",
        )
        if not rollback:
            return
        g.add_argument(
            "--check-against",
            metavar="BUNDLE",
            help="a rollout's canary: start on BUNDLE (the model this one replaces), check the "
            "model against it on live frames as --swap-check does, and take it only when they "
            "agree; /ready says 503 until then, and stays 503 with the reason if it is refused "
            "(the run goes on with BUNDLE)",
        )
        g.add_argument(
            "--rollback-window",
            type=float,
            default=30.0,
            metavar="S",
            help="after a swap, watch each label's detection rate and confidence for S seconds "
            "(default 30; 0: off) and put the old model back if one collapses",
        )
        g.add_argument(
            "--rollback-below",
            type=float,
            default=0.5,
            metavar="F",
            help="a collapse: a label's rate or mean confidence under F times the old model's "
            "(default 0.5)",
        )

    @classmethod
    def from_args(cls, args) -> SwapOptions:
        window = getattr(args, "rollback_window", 0.0)  # edgert serve: no rollback watch
        below = getattr(args, "rollback_below", 0.5)
        if not 0 < below < 1 or window < 0:
            raise ModelError("--rollback-below is between 0 and 1, --rollback-window >= 0 s")
        return cls(
            watch=args.watch_model,
            endpoint=args.model_endpoint,
            allow=tuple(args.allow_models),
            check=args.swap_check or bool(getattr(args, "check_against", None)),
            rollback_s=window,
            rollback_below=below,
            against=getattr(args, "check_against", None),
        )
