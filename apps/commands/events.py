"""edgert events query STORE: a camera's stored tracks and events, filtered, without the camera
running (the store a run's ``--store`` wrote; apps/store)."""

from __future__ import annotations

import re

from edgert.runtime import json_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "events",
        help="a camera's stored events (e.g. edgert events query clips/.edgert/events.db "
        "--since -1h --label person)",
        description="Read the tracks and events a camera kept with --store, while it runs or not.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    q = verbs.add_parser("query", help="the events that pass the filters, newest first")
    # --since -1h: a time before now, a value (argparse takes only -1 or -1.5 for one)
    q._negative_number_matcher = re.compile(r"^-\d+(\.\d+)?[smhdw]?$")
    q.add_argument("store", metavar="STORE", help="the store's file (a camera's --store)")
    q.add_argument("--since", metavar="TIME", help="ISO 8601, seconds since the epoch, or -1h")
    q.add_argument("--until", metavar="TIME", help="as --since")
    for name in ("camera", "label", "zone", "line"):
        q.add_argument(f"--{name}", metavar=name.upper(), help=f"only events of this {name}")
    q.add_argument("--limit", default="100", metavar="N", help="at most N events (default 100)")
    q.add_argument("--cursor", metavar="C", help="the next page: the next_cursor a page gave")
    q.add_argument("--json", action="store_true", help="print the page as JSON")
    q.add_argument(
        "--similar-to",
        metavar="TRACK",
        help="the tracks most similar to this one (their stored embeddings, exact cosine), "
        "most similar first, under --camera, --label, --since, --until and --limit (default 20)",
    )
    q.add_argument(
        "--text",
        metavar="WORDS",
        help='the tracks whose stored vectors are most like these words (e.g. "person with a '
        'red bag"), by the text tower of --bundle; filters as --similar-to',
    )
    q.add_argument(
        "--model",
        metavar="NAME",
        help="with --text: the name the camera gave the embedder, where --secondary's name= "
        "gave it one (default: the bundle's file name, as the camera names it)",
    )
    q.add_argument(
        "--bundle",
        metavar="EMBED.edgert",
        help="with --text: the embedder the store's vectors came from, exported with "
        "--text-tower (its model name must be the store's)",
    )
    p.set_defaults(func=run)


def similar(args) -> int:
    """``--similar-to TRACK``: the search of ``GET /api/search`` on the store (a file, or a
    server's: every device's tracks)."""
    from edgert.apps.store import search

    f, own = search.parse(_search_args(args, "similar_to", args.similar_to))

    return _searched(
        args,
        lambda conn, ph: search.search(
            conn, search.Index(), f, similar_to=own["similar_to"], mark=ph
        ),
    )


def _searched(args, find) -> int:
    """``find(conn, mark)`` on the store, its answer printed; what the store lacks in one
    sentence (no embeddings, or a store of version 1 without their table)."""
    from edgert.apps.store import query, search

    def reader(conn, ph):
        try:
            return find(conn, ph)
        except search.NoEmbeddings as exc:
            raise query.QueryError(f"{args.store}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a store of version 1: no embeddings table
            if "embeddings" not in str(exc):
                raise
            raise query.QueryError(f"{args.store}: the store holds no embeddings") from None

    return _print_found(args, query.read(args.store, reader))


def _search_args(args, key: str, value) -> dict:
    """The search's filters of ``--similar-to`` / ``--text`` (their default limit 20)."""
    from edgert.apps.store import query

    given = {k: getattr(args, k) for k in ("camera", "label", "since", "until")}
    given = {k: v for k, v in given.items() if v is not None}
    if args.zone or args.line or args.cursor:
        flag = key.replace("_", "-")
        raise query.QueryError(f"--{flag} takes --camera, --label, --since, --until, --limit")
    given[key] = value
    given["limit"] = args.limit if args.limit != "100" else "20"
    return given


def by_text(args) -> int:
    """``--text WORDS --bundle EMBED.edgert``: the search of ``GET /api/search?text=``."""
    from edgert.apps.camera.features.secondary_models import secondary_name
    from edgert.apps.store import query, search, text
    from edgert.runtime.text_tower import TextTower, check_text

    if args.similar_to is not None:
        raise query.QueryError("give --text or --similar-to, not both")
    if not args.bundle:
        raise query.QueryError("--text needs --bundle EMBED.edgert (the pair's text tower)")
    f, _, words = text.parse_text(_search_args(args, "text", args.text))
    words = check_text(words)
    tower = TextTower(args.bundle)
    vector = tower.encode(words)

    # the store keeps a camera's vectors under the name it gave the embedder: the bundle's
    # file name (--secondary pair.edgert: pair), or its name= (--model)
    model = args.model or secondary_name(args.bundle)
    return _searched(
        args, lambda conn, ph: text.text_search(conn, search.Index(), f, vector, model, ph)
    )


def _print_found(args, found: dict) -> int:
    if args.json:
        print(json_text.dumps(found, indent=2))
        return 0
    for r in found["results"]:
        t = r["track"]
        print(f"{r['similarity']:.4f}  track {t['id']}  {t['camera']}  {t['label'] or ''}".rstrip())
    print(f"{len(found['results'])} track(s) by model {found['model']}")
    return 0


def run(args) -> int:
    from edgert.apps.store import query

    if args.text is not None:
        return by_text(args)
    if args.bundle is not None:
        raise query.QueryError("--bundle goes with --text")
    if args.similar_to is not None:
        return similar(args)
    f = query.Filters.parse(
        {
            k: getattr(args, k)
            for k in ("camera", "label", "zone", "line", "since", "until", "limit", "cursor")
        }
    )
    page = query.read(args.store, lambda conn, ph: query.events(conn, f, ph))
    if args.json:
        print(json_text.dumps(page, indent=2))
        return 0
    for e in page["events"]:
        where = " ".join(f"{k}={e[k]}" for k in ("label", "zone", "line") if e[k])
        media = e["clip"] or e["snapshot"]
        gone = " (deleted)" if media and e["media_gone"] else ""
        track = f" track {e['track']}" if e["track"] is not None else ""
        device = f"{e['device']}: " if e.get("device") else ""  # a server's: which device
        print(
            f"{e['time_iso']}  {e['kind']:<11} {device}{e['camera']}{track} {where}".rstrip()
            + (f"  {media}{gone}" if media else "")
        )
    print(
        f"{len(page['events'])} event(s)"
        + (f"; more with --cursor {page['next_cursor']}" if page["next_cursor"] else "")
    )
    return 0
