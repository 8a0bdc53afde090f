"""Every private part of PyTriton that ``edgert serve`` touches, in one place, as
``runtime/backends/tensorrt_compat.py`` holds TensorRT's version differences.

PyTriton 0.7 has no public way to do what a clean stop and a model swap need:

- the ``tritonserver`` process (its pid, whether it lives, its exit code): ``Triton._triton_server``
  (a ``pytriton.server.triton_server.TritonServer``) and its ``_tritonserver_running_cmd`` (an
  ``sh.RunningCommand``): the stop waits for the Python backend stubs below it and kills what a
  failed stop leaves; a swap frees an old version once its stubs are gone;
- the Python backend's shared-memory prefix (``Triton._python_backend_config``): regions a
  crashed stub leaves in ``/dev/shm`` are removed;
- the models it serves (``Triton._model_manager``: ``models``, and ``_models`` keyed by
  (lower-case name, version)): a new version is registered there so that ``is_alive()`` and the
  stop see it, and an old one is removed;
- loading a model version while serving: the workspace (``Triton._workspace``), the context the
  inference functions are registered in (``Triton._triton_context``, whose ``model_configs``
  keeps every function it was given) and the event callback (``Triton._on_model_event``).

The version range is pinned (``SUPPORTED``; pyproject's ``serve`` extra); :func:`unsupported`
says in one sentence when another PyTriton is installed, and ``PRIVATE`` lists the names, which
no other module may use (tests/test_import_graph.py).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

SUPPORTED = ((0, 7), (0, 8))  # [from, to): what these private names were read from
PRIVATE = (
    "_triton_server",
    "_tritonserver_running_cmd",
    "_python_backend_config",
    "_model_manager",
    "_models",
    "_workspace",
    "_triton_context",
    "_on_model_event",
)


def unsupported(version: str) -> str | None:
    """Why ``edgert serve`` cannot run on PyTriton ``version`` (None when it can)."""
    try:
        have = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return f"PyTriton {version} is not a version edgert knows"
    low, high = SUPPORTED
    if low <= have < high:
        return None
    return (
        f"edgert serve works with PyTriton {low[0]}.{low[1]}.x (it relies on parts of it that "
        f"change between releases), and this is {version}"
    )


# -- the tritonserver process ---------------------------------------------------------------------
def server_pid(triton) -> int:
    return triton._triton_server._tritonserver_running_cmd.pid


def server_alive(triton) -> bool:
    return triton._triton_server.is_alive()


def server_exit_code(triton):
    """tritonserver's exit code once it ended (negative: killed by that signal)."""
    return triton._triton_server._tritonserver_running_cmd.process.exit_code


def shm_prefix(triton) -> str:
    """The prefix of the Python backend's shared-memory regions in /dev/shm."""
    return triton._python_backend_config["shm-region-prefix-name"]


# -- the models it serves -------------------------------------------------------------------------
def served_models(triton) -> list:
    """PyTriton's Model objects, every name and version."""
    return list(triton._model_manager.models)


def register(triton, model) -> None:
    """A model version loaded outside ``bind``/``run`` (a swap), known to ``is_alive()`` and
    cleaned and unloaded by the stop."""
    triton._model_manager._models[(model.model_name.lower(), model.model_version)] = model


def unregister(triton, model) -> None:
    triton._model_manager._models.pop((model.model_name.lower(), model.model_version), None)


def model_version(triton, binding: dict, version: int):
    """PyTriton's Model of one ``bind`` argument set at ``version``, on a workspace folder of its
    own (its sockets are named after the model, not the version): (model, folder)."""
    from pytriton.models.model import Model
    from pytriton.utils.workspace import Workspace

    folder = Path(triton._workspace.path) / f"{binding['model_name']}-v{version}"
    model = Model(
        model_name=binding["model_name"],
        model_version=version,
        inference_fn=binding["infer_func"],
        inputs=binding["inputs"],
        outputs=binding["outputs"],
        config=binding["config"],
        workspace=Workspace(folder),
        triton_context=triton._triton_context,
        strict=True,
    )
    model.on_model_event(triton._on_model_event)
    return model, folder


def forget_functions(triton, functions) -> None:
    """Drop ``functions`` from the context's model configs: its ModelConfigDict keeps every
    function ever set in a list its ``__delitem__`` leaves alone, and the functions hold the task
    models and the recent images (measured: +10 MB a swap without this)."""
    configs = triton._triton_context.model_configs
    for fn in functions:
        with contextlib.suppress(KeyError):
            del configs[fn]
        keys = getattr(configs, "_keys", None)
        if isinstance(keys, list):
            keys[:] = [k for k in keys if k is not fn]
