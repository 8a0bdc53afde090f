"""edgert config: the site file of `edgert camera --config` checked, and its JSON Schema."""

from __future__ import annotations

import sys

from edgert.runtime import json_text


def add_parser(sub) -> None:
    p = sub.add_parser(
        "config",
        help="check a site file (edgert camera --config), or write its JSON Schema",
        description="The site file of `edgert camera --config FILE`: `check` finds every problem "
        "in one pass (YAML, unknown keys, wrong types, lines and zones outside the frame, a "
        "missing bundle, an unset ${EDGERT_...}), each with its path and line, exit 2; "
        "`schema` writes the JSON Schema made from the same model (for an editor's completion "
        "and for the Helm chart's values).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="every problem of a site file, with its line")
    check.add_argument("file", metavar="FILE")
    schema = actions.add_parser("schema", help="the site file's JSON Schema")
    schema.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")
    p.set_defaults(func=run)


def run(args) -> int:
    from edgert.apps.config import ConfigError, json_schema, load_site

    if args.action == "schema":
        text = json_text.dumps(json_schema(), indent=2) + "\n"
        if args.output is None:
            sys.stdout.write(text)
            return 0
        from edgert.runtime.errors import OutputError

        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            raise OutputError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        return 0
    try:
        site = load_site(args.file)
    except ConfigError as exc:
        for line in exc.lines():
            print(f"edgert config: error: {line}", file=sys.stderr)
        return exc.exit_code
    print(
        f"{args.file}: ok: {len(site.names)} camera{'s' if len(site.names) != 1 else ''} "
        f"({', '.join(site.names)}), version {site.version}"
    )
    return 0
