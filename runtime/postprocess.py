"""The names users import from this module (the README's example imports ``classify`` here)
stay here; the module is ``tasks/postprocess.py``, as task decoding lives under ``tasks/``."""

from .tasks.postprocess import (  # noqa: F401 - the names users import from here
    Classification,
    classify,
    looks_like_probabilities,
    mask_to_source,
    segment,
    softmax,
)
