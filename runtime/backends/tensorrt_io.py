"""The I/O tensors of a TensorRT engine as edgert holds them: names, dtypes, shapes, profile
bounds and output capacity read from TensorRT's ``ICudaEngine`` / ``IExecutionContext`` (the
name-based API of 8.5+), and the shape checks made before TensorRT is asked (a shape outside the
profile, an output larger than its buffer)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ModelError, ShapeError
from . import tensorrt_compat as compat


class TensorIO:
    """One I/O tensor: spec, profile bounds (inputs), buffers."""

    def __init__(self, name: str, is_input: bool, dtype: str, shape: tuple[int, ...]) -> None:
        self.name = name
        self.is_input = is_input
        self.dtype = dtype
        self.shape = shape
        self.min_shape: tuple[int, ...] | None = None
        self.max_shape: tuple[int, ...] = shape
        self.buffers = None


def describe_io(
    trt, engine, context, set_input_shape: Callable[[str, tuple], None]
) -> list[TensorIO]:
    """Every I/O tensor of ``engine`` (TensorRT's ICudaEngine), inputs with their profile
    bounds and outputs sized at the profile's maximum (every input set to it on ``context``)."""
    tensors = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        if is_input and getattr(engine, "is_shape_inference_io", lambda n: False)(name):
            raise ModelError(
                f"input {name} is a shape tensor (its values set output shapes), which must "
                "live in host memory; edgert's TensorRT backend does not support such engines"
            )
        dtype = compat.numpy_dtype(str(engine.get_tensor_dtype(name)), name)
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        io = TensorIO(name, is_input, dtype, shape)
        if is_input and any(d < 0 for d in shape):
            lo, _opt, hi = engine.get_tensor_profile_shape(name, 0)
            io.min_shape = tuple(int(d) for d in lo)
            io.max_shape = tuple(int(d) for d in hi)
        tensors.append(io)
    # output capacity: set every input to its profile maximum and ask for output shapes
    for t in tensors:
        if t.is_input:
            set_input_shape(t.name, t.max_shape)
    for t in tensors:
        if not t.is_input:
            t.max_shape = tuple(int(d) for d in context.get_tensor_shape(t.name))
            if any(d < 0 for d in t.max_shape):
                raise ModelError(
                    f"output {t.name} has a data-dependent shape, which edgert's TensorRT backend does not support"
                )
    return tensors


def check_profile(t: TensorIO, shape: tuple[int, ...]) -> None:
    """ShapeError when ``shape`` is outside input ``t``'s optimisation profile."""
    if t.min_shape is None:
        return
    if any(s < lo or s > hi for s, lo, hi in zip(shape, t.min_shape, t.max_shape)):
        lo = "x".join(map(str, t.min_shape))
        hi = "x".join(map(str, t.max_shape))
        raise ShapeError(
            f"input {t.name} shape {'x'.join(map(str, shape))} is outside the engine's profile {lo} .. {hi}"
        )


def check_capacity(t: TensorIO, shape: tuple[int, ...]) -> None:
    """An output larger than its buffer (sized at the profile's maximum inputs; a model whose
    outputs do not grow with its inputs) would be written past the buffer: refused."""
    if any(d < 0 for d in shape) or int(np.prod(shape)) > int(np.prod(t.max_shape)):
        raise ShapeError(
            f"output {t.name} would be {'x'.join(map(str, shape))}, larger than the "
            f"{'x'.join(map(str, t.max_shape))} it was sized for at the profile's maximum"
        )
