"""Text search over the history (``GET /api/search?text=person with a red bag``, ``edgert events
query STORE --text "..." --bundle EMBED.edgert``): the text tower of an embed bundle
(:mod:`edgert.runtime.text_tower`) turns the text into a vector of its image tower's space, and
the tracks are ranked by its cosine to their stored vectors (:func:`.search.search`, the same
filters and limit) - only the vectors of that same model: a vector of another model lives in
another space and does not compare (refused in one sentence)."""

from __future__ import annotations

from .query import Filters, QueryError
from .search import Index, NoEmbeddings, parse, search


def parse_text(given: dict) -> tuple[Filters, str | None, str]:
    """(filters, model or None, text) of ``?text=...&model=...&camera=...``."""
    rest = dict(given)
    text = rest.pop("text", None)
    if rest.get("similar_to") is not None:
        raise QueryError("give text= or similar_to=, not both")
    f, own = parse(rest)
    return f, own.get("model"), text or ""


def chosen(embedders: dict, model: str | None):
    """(name, embedder) of the camera's embedder with a text tower (``model`` when given);
    NoEmbeddings when the camera runs none, QueryError for a model not one of them."""
    if not embedders:
        raise NoEmbeddings(
            "this camera runs no embedder: searching by text needs --secondary EMBEDDER.edgert "
            "exported with --text-tower"
        )
    towers = {n: e for n, e in embedders.items() if e.has_text}
    if model is not None and model not in embedders:
        raise QueryError(f"model {model!r} is not an embedder of this camera")
    name = model or next(iter(towers), None) or next(iter(embedders))
    if name not in towers:
        raise NoEmbeddings(
            f"the embedder {name} carries no text tower: export it with --text-tower "
            "TEXT.onnx --tokenizer tokenizer.json to search by text"
        )
    return name, towers[name]


def text_search(conn, index: Index, f: Filters, vector, model: str, mark: str = "?") -> dict:
    """:func:`.search.search` of the text's ``vector`` over the store's vectors of ``model``
    (the bundle whose text tower made it); QueryError when the store holds vectors of other
    models only, NoEmbeddings when it holds none."""
    try:
        return search(conn, index, f, query=vector, model=model, mark=mark)  # reads the index
    except NoEmbeddings:
        with index.lock:
            held = sorted(index.models)
        if not held or model in held:
            raise
        raise QueryError(
            f"the store's vectors are of model {', '.join(held)}, the text tower's of {model}: "
            "vectors of another model do not compare"
        ) from None
