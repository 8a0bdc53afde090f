"""What travels through the camera pipeline (a :class:`Frame`) and what it runs on frames
(:class:`Steps`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Frame:
    index: int  # within its stream
    t_capture: float
    image: np.ndarray
    stream: int = 0
    tensor: object = None
    transform: object = None
    results: object = None
    t_ready: float = 0.0  # when preprocessing finished
    timings: dict[str, float] = field(default_factory=dict)  # stage -> ms
    # the frame's own time in its video (seconds; files), where the source knows it: a tracker
    # steps by this, since a file is read faster or slower than it was filmed
    t_media: float | None = None
    tracks: list = field(default_factory=list)  # set by tracking
    events: list = field(default_factory=list)  # track and counting events of this frame
    inferred: bool = True  # False: the gate skipped it (its results are predicted or held)
    gate: str | None = None  # why the gate sent it to inference (gate.REASONS)
    model: object = None  # the swap.Loaded it was prepared for (a run that can swap its model)
    # (height, width) of the camera's frame when ``image`` came smaller, scaled by the decoder
    # to what the model resizes it to (no sink needs full frames); results are in these pixels
    source_hw: tuple[int, int] | None = None
    # the camera's full frame beside a scaled ``image``, from the decoder's full-picture branch
    # while a viewer watches, at the viewer's rate (None on the other frames)
    view: np.ndarray | None = None
    batch: int = -1  # the primary batch it was inferred in (a sequence number), and its frames
    batch_frames: int = 1

    @property
    def scene_hw(self) -> tuple[int, int]:
        """(height, width) of the scene's pixels, which results, lines and zones are in."""
        return self.source_hw or self.image.shape[:2]

    @property
    def picture(self) -> np.ndarray | None:
        """The camera's pixels of this frame: the frame itself, or the full picture the decoder
        gave beside a frame it scaled (of the camera's size: results are in its pixels); None
        when it gave only the model's size."""
        if self.source_hw is None:
            return self.image
        view = self.view
        return view if view is not None and view.shape[:2] == tuple(self.source_hw) else None

    @property
    def t_scene(self) -> float:
        """The frame's time in the scene: its media time in a video file, else its capture time."""
        return self.t_media if self.t_media is not None else self.t_capture


@dataclass
class Steps:
    """What the pipeline runs on frames: ``prepare`` one frame in its stream's thread
    (preprocessing), ``infer`` a batch of frames of several streams in one call (returns the
    outputs), ``finish`` the same batch with those outputs (postprocessing: sets frame.results);
    ``discard`` a prepared frame that a live stream's queue dropped before inference."""

    prepare: Callable[[Frame], None]
    infer: Callable[[list], object]
    finish: Callable[[list, object], None]
    names: tuple[str, str, str] = ("preprocess", "infer", "postprocess")
    discard: Callable[[Frame], None] = lambda frame: None
