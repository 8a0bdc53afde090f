"""``edgert serve``: bundles behind a real NVIDIA Triton Inference Server (PyTriton's
``tritonserver``): KServe v2 HTTP/gRPC, dynamic batching, Prometheus metrics.

Per bundle two models:

- ``NAME``: the bundle's own tensors (names, dtypes, shapes without the batch axis, max batch from
  the bundle), dynamic batching, inference by :class:`edgert.runtime.Engine`.
- ``NAME_image``: one encoded image per request (BYTES, JPEG/PNG) -> the bundle's preprocessing ->
  inference (requests of any image size batched together after preprocessing) -> the task's
  decoded result as JSON (BYTES ``result``), plus the raw outputs.

Every instance has its own engine (``--instances N``): Triton runs instances in parallel, and an
engine serialises its own calls.

A package along its seams: ``config`` (what is asked and checked before Triton starts),
``models`` (what Triton is given of a bundle), ``lifecycle`` (start, serve, stop) and
``pytriton_compat`` (every private part of PyTriton touched); a new bundle while serving is
:mod:`edgert.apps.swap.serve`.
"""

from .config import PIP_LINE, ServeConfig, check_ports, model_names, require_pytriton
from .lifecycle import serve

__all__ = ["PIP_LINE", "ServeConfig", "check_ports", "model_names", "require_pytriton", "serve"]
