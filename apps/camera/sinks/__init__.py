"""Where a camera run's results go, by URI, like jetson-utils' ``videoOutput``, chosen through one
table (:data:`SCHEMES`): the scheme names the module that opens it, the function that checks a
URI before anything opens (a port, a broker address), the one that says which files it writes
(the same-file guard), the flag that is its short form, whether it turns tracking on, what it
listens on, and what it is in words: ``--output``'s help, the camera's epilog and the short flags
are made from the rows (``edgert camera --help`` lists them).

Every sink is a :class:`Sink` (``base.py``). A new kind of output is one module with an
``open_uri(uri, ctx)`` and one row here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from edgert.apps.lazy import lazy_names
from edgert.apps.uris import redact
from edgert.runtime.errors import OutputError

from . import own
from .base import Sink, SinkContext, frame_record, grid_columns
from .mqtt import MqttOptions

VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv")


@dataclass(frozen=True)
class Scheme:
    """One row of the table: the form shown to users; the module, imported when a sink of this
    scheme is checked or opened; its opener ``(uri, SinkContext) -> Sink``; optionally
    ``check(uri, options)`` (run before any source opens) and ``paths(uri, streams, mosaic) ->
    [(what, Path)]`` (the files it writes); ``flag``: the option that is its short form;
    ``tracks``: a sink whose whole purpose is events turns tracking on; ``picture``: it shows
    the annotated frames (without one, a run with a display opens a window); ``frames``: it
    shows or keeps the camera's pixels, so the decoder gives full frames while it is open (else
    GStreamer scales them to the model's input: ``--decoder-scale``); ``view_rate(uri) -> fps``:
    it needs them only while someone watches it, at most that many a second (the web viewer's
    video streams hold ``SinkContext.demand``); ``listens(uri) -> (host, port)``: it listens on
    a port; ``probes``: that port answers /metrics, the probes and /model; ``says``: what it
    is, for the help."""

    form: str
    module: str
    opener: str = "open_uri"
    check: str | None = None
    paths: str | None = None
    flag: str | None = None
    tracks: bool = False
    picture: bool = False
    frames: bool = False
    view_rate: str | None = None
    listens: str | None = None
    probes: bool = False
    says: str = ""


SCHEMES: dict[str, Scheme] = {
    "display": Scheme(
        "display://0",
        "edgert.apps.camera.sinks.display",
        picture=True,
        frames=True,
        says="a window per stream (or one mosaic, --mosaic)",
    ),
    "http": Scheme(
        "http://HOST:PORT",
        "edgert.apps.camera.sinks.web",
        check="check",
        picture=True,
        frames=True,
        view_rate="view_fps",
        listens="address",
        probes=True,
        says="the web viewer: MJPEG and live numbers, a grid of the streams, /metrics and the "
        "probes on its port (?fps=N: its pictures a second while watched, 10 by default)",
    ),
    "file": Scheme(
        "file://out.mp4",
        "edgert.apps.camera.sinks.video",
        paths="paths",
        picture=True,
        frames=True,
        says="a video file, or a path ending .mp4, .avi or .mkv (out_<i>.mp4 per stream, or "
        "one mosaic with --mosaic; H.264 where GStreamer has an encoder, else mp4v)",
    ),
    "jsonl": Scheme(
        "jsonl://FILE",
        "edgert.apps.camera.sinks.jsonl",
        paths="paths",
        flag="--jsonl",
        says="a header line naming the streams, then one JSON line per frame",
    ),
    "events": Scheme(
        "events://FILE",
        "edgert.apps.camera.sinks.events",
        paths="paths",
        flag="--events",
        tracks=True,
        says="one JSON line per track and counting event",
    ),
    "mqtt": Scheme(
        "mqtt://HOST/PREFIX",
        "edgert.apps.camera.sinks.mqtt",
        check="check",
        flag="--mqtt",
        says="events and heartbeats to an MQTT broker",
    ),
    "mqtts": Scheme(
        "mqtts://HOST/PREFIX",
        "edgert.apps.camera.sinks.mqtt",
        check="check",
        flag="--mqtt",
        says="the same over TLS",
    ),
    "snapshots": Scheme(
        "snapshots://DIR",
        "edgert.apps.camera.sinks.snapshots",
        check="check",
        paths="paths",
        flag="--snapshots",
        tracks=True,
        frames=True,
        says="each track's best picture when it ends",
    ),
    "clips": Scheme(
        "clips://DIR",
        "edgert.apps.camera.sinks.clips",
        check="check",
        paths="paths",
        flag="--clips",
        tracks=True,
        picture=True,
        frames=True,
        says="an MP4 around each event, with the seconds before it",
    ),
    "store": Scheme(
        "store://PATH",
        "edgert.apps.store.sink",
        check="check",
        paths="paths",
        tracks=True,
        says="tracks and events in a SQLite store, read by `edgert events query` and /api/events "
        "(beside --clips or --snapshots unless --store PATH or --store none)",
    ),
    "rtsp": Scheme(
        "rtsp://[USER:PASS@]HOST:PORT/PATH",
        "edgert.apps.camera.sinks.rtsp",
        check="check",
        picture=True,
        frames=True,
        listens="address",
        says="the annotated streams re-served over RTSP (one mount per stream)",
    ),
}


def _folder_flags(parser) -> None:
    """The folders' flags: --clips, its rolls and bound, --keep-days."""
    parser.add_argument(
        "--clips",
        metavar="DIR",
        help="an MP4 around each event (track start, line crossing, zone entry) from 5 s "
        "before to 5 s after the last one it merged, from a ring of encoded video (an RTSP "
        "camera's own H.264/H.265 packets, not re-encoded); the event carries its path (the "
        "same as --output clips://DIR; ?pre=S&post=S&events=A,B&clean=1&max_gb=G&keep_days=D"
        "&bitrate=KBPS&reencode=1)",
    )
    parser.add_argument(
        "--pre-roll",
        type=float,
        metavar="S",
        help="--clips: seconds kept before an event (default 5; pre= of clips://)",
    )
    parser.add_argument(
        "--post-roll",
        type=float,
        metavar="S",
        help="--clips: seconds after the last event a clip merged (default 5; post=)",
    )
    parser.add_argument(
        "--clips-max-gb",
        type=float,
        metavar="G",
        help="--clips: the folder's finished clips kept under G gigabytes, the oldest "
        "deleted first, never the newest (max_gb=)",
    )
    parser.add_argument(
        "--keep-days",
        type=float,
        metavar="D",
        help="--clips, --snapshots and the store: files and rows older than D days are deleted",
    )
    for kind in ("clips", "snapshots"):
        parser.add_argument(
            f"--stream-{kind}",
            action="append",
            default=[],
            metavar="STREAM:on|off",
            help=f"--{kind}: off for one stream (a camera's {kind}: false in a site file); "
            "repeatable",
        )


def forms() -> list[str]:
    """Each row as the help shows it: its form, its short flag (``--jsonl FILE`` for a file's,
    ``--mqtt URI`` for a URI's) and what it is."""
    out = []
    for e in SCHEMES.values():
        value = e.form.split("://", 1)[1] if e.paths else "URI"
        flag = f" (or {e.flag} {value})" if e.flag else ""
        out.append(f"{e.form}{flag}: {e.says}" if e.says else e.form + flag)
    return out


def short_flags() -> list[str]:
    """The flags that are short forms of a row (``--jsonl FILE`` for ``jsonl://FILE``)."""
    return list(dict.fromkeys(e.flag for e in SCHEMES.values() if e.flag))


@dataclass(frozen=True)
class SinkOptions:
    """The sinks' own options: the mosaic, what a failing sink does to the run, and MQTT's."""

    mosaic: bool = False  # several streams: one video file (or window) tiled
    on_error: str = "stop"  # stop: the run ends; continue: that sink ends, the run goes on
    headless: bool = False  # never open a display window (none is opened unless asked for)
    mqtt: MqttOptions = field(default_factory=MqttOptions)

    @staticmethod
    def add_arguments(parser) -> None:
        parser.add_argument(
            "--output",
            action="append",
            default=[],
            metavar="URI",
            help=", ".join(e.form for e in SCHEMES.values())
            + "; repeat for several (what each is: below the options)",
        )
        own.add_arguments(parser)  # --stream-output STREAM:URI
        parser.add_argument(
            "--mosaic",
            action="store_true",
            help="several streams: one video file (or window) tiled",
        )
        parser.add_argument(
            "--jsonl",
            metavar="FILE",
            help="one JSON line per processed frame, after a header line per run (appended to)",
        )
        parser.add_argument(
            "--snapshots",
            metavar="DIR",
            help="each track's best picture (its box drawn) written to DIR when the track ends; "
            "the track_end event carries its path; implies --track (the same as --output "
            "snapshots://DIR; ?crop=1 adds the crop, ?clean=1 leaves the box out)",
        )
        _folder_flags(parser)
        parser.add_argument(
            "--on-output-error",
            choices=["stop", "continue"],
            default="stop",
            help="when an output cannot be written (a full disk): stop the run (default), or go "
            "on without that output; either way the exit code is non-zero",
        )
        parser.add_argument("--headless", action="store_true", help="never open a display window")

    @classmethod
    def from_args(cls, args) -> SinkOptions:
        return cls(args.mosaic, args.on_output_error, args.headless, MqttOptions.from_args(args))


def with_folder_flags(sinks: list, args) -> list:
    """The sinks with ``--pre-roll``, ``--post-roll``, ``--clips-max-gb`` and ``--keep-days`` added
    to the query of each clips:// (and, for ``--keep-days``, snapshots://) sink they apply to (a
    flag wins over the same option in the URI); OutputError when none does."""
    from urllib.parse import urlencode

    flags = {
        "pre": ("--pre-roll", getattr(args, "pre_roll", None)),
        "post": ("--post-roll", getattr(args, "post_roll", None)),
        "max_gb": ("--clips-max-gb", getattr(args, "clips_max_gb", None)),
        "keep_days": ("--keep-days", getattr(args, "keep_days", None)),
    }
    given = {k: v for k, (_, v) in flags.items() if v is not None}
    for kind in ("clips", "snapshots"):  # the streams each keeps, where a camera is off
        own = _streams_on(
            getattr(args, f"stream_{kind}", None) or [], kind, len(args.source or [1])
        )
        if own is not None:
            flags[f"{kind}_streams"] = (f"--stream-{kind}", own)
            given[f"{kind}_streams"] = own
    takes = {
        "clips": ("pre", "post", "max_gb", "keep_days", "clips_streams"),
        "snapshots": ("keep_days", "snapshots_streams"),
        "store": ("keep_days",),
    }
    out, used = [], set()
    for uri in sinks:
        extra = {k: given[k] for k in takes.get(resolve(uri)[0], ()) if k in given}
        used |= set(extra)
        # clips_streams / snapshots_streams: the sink's streams=
        extra = {("streams" if k.endswith("_streams") else k): v for k, v in extra.items()}
        if extra:
            uri += ("&" if "?" in uri else "?") + urlencode(extra)
        out.append(uri)
    unused = [flags[k][0] for k in given if k not in used]
    if unused:
        needs = "--clips DIR or --snapshots DIR" if unused == ["--keep-days"] else "--clips DIR"
        needs = "--snapshots DIR" if unused == ["--stream-snapshots"] else needs
        raise OutputError(f"{' and '.join(unused)} apply to {needs}, and none was given")
    return out


def _streams_on(forms: list, kind: str, streams: int) -> str | None:
    """``streams=`` of a clips:// or snapshots:// sink (``0+2``) when a ``--stream-KIND
    STREAM:off`` leaves a stream out (None: every stream); OutputError in one sentence."""
    on = dict.fromkeys(range(streams), True)
    for form in forms:
        head, _, value = str(form).partition(":")
        if not (head.isascii() and head.isdigit() and value in ("on", "off")):
            raise OutputError(f"--stream-{kind} {form}: give STREAM:on or STREAM:off")
        if int(head) >= streams:
            raise OutputError(f"--stream-{kind} {form}: there is no stream {head}")
        on[int(head)] = value == "on"
    if not forms:
        return None
    return "+".join(str(i) for i, yes in on.items() if yes) or "none"


def resolve(uri: str) -> tuple[str, str]:
    """(scheme, URI): a bare path ending .mp4, .avi or .mkv is a video file."""
    scheme, sep, _ = uri.partition("://")
    if not sep:
        return ("file", uri) if uri.lower().endswith(VIDEO_SUFFIXES) else ("", uri)
    return scheme.lower(), uri


def scheme_of(uri: str) -> Scheme:
    """The table's row for ``uri``; OutputError listing the forms when there is none."""
    scheme, _ = resolve(uri)
    entry = SCHEMES.get(scheme)
    if entry is None:
        forms = ", ".join(dict.fromkeys(s.form for s in SCHEMES.values()))
        raise OutputError(f"unsupported output {redact(uri)!r}; supported: {forms}")
    if entry.paths is not None and entry.flag is not None and not uri.split("://", 1)[1].strip():
        raise OutputError(f"{entry.flag} needs a file name, and it was given an empty one")
    return entry


def _function(entry: Scheme, name: str | None):
    return getattr(importlib.import_module(entry.module), name) if name else None


def check_sink(uri: str, options: SinkOptions | None = None) -> None:
    """OutputError when ``uri`` cannot be a sink, before anything opens."""
    entry = scheme_of(uri)
    check = _function(entry, entry.check)
    if check is not None:
        check(uri, options)


def open_sink(uri: str, ctx: SinkContext) -> Sink:
    entry = scheme_of(uri)
    return _function(entry, entry.opener)(uri, ctx)


def sink_paths(uri: str, streams: int = 1, mosaic: bool = False) -> list[tuple[str, Path]]:
    """(what, path) of every file the sink ``uri`` writes; what names the option as given."""
    entry = scheme_of(uri)
    paths = _function(entry, entry.paths)
    if paths is None:
        return []
    found = paths(uri, streams, mosaic)
    if entry.flag is not None:  # --jsonl FILE and --output jsonl://FILE are the same
        found = [(f"{entry.flag} {p}", p) for _, p in found]
    return found


def from_flag(flag: str, value: str) -> str:
    """The sink URI a short-form flag stands for: ``--jsonl FILE`` -> ``jsonl://FILE``; ``--mqtt
    URI`` must be a URI of a scheme that flag stands for (its own check says what is wrong)."""
    rows = {name: e for name, e in SCHEMES.items() if e.flag == flag}
    scheme, _ = resolve(value)
    if scheme in rows:
        return value
    name, entry = next(iter(rows.items()))
    if entry.paths is not None:  # a file's flag: the value is the file
        return f"{name}://{value}"
    _function(entry, entry.check)(value, None)  # raises, in the scheme's own words
    raise OutputError(
        f"{flag} takes {' or '.join(e.form for e in rows.values())}, not {redact(value)!r}"
    )


def tracks(uri: str) -> bool:
    """Whether the sink ``uri`` turns tracking on (its purpose is events)."""
    return scheme_of(uri).tracks


def shows_picture(uri: str) -> bool:
    return scheme_of(uri).picture


def needs_frames(uri: str) -> bool:
    """Whether the sink ``uri`` shows or keeps the camera's own pixels (full frames)."""
    return scheme_of(uri).frames


def view_rate(uri: str) -> float | None:
    """The pictures a second the sink ``uri`` needs full frames at, only while someone watches
    it; None: it needs them always, or never (:func:`needs_frames`)."""
    entry = scheme_of(uri)
    rate = _function(entry, entry.view_rate)
    return None if rate is None else rate(uri)


def listener(uri: str) -> tuple[str, str, int, bool] | None:
    """(what, host, port, whether the probes answer there) of the port the sink ``uri`` listens
    on, or None."""
    entry = scheme_of(uri)
    where = _function(entry, entry.listens)
    if where is None:
        return None
    return (f"--output {redact(uri)}", *where(uri), entry.probes)


def serves_probes(uris: list) -> bool:
    """Whether one of the sinks ``uris`` answers /metrics, the probes and /model on its port."""
    rows = [SCHEMES.get(resolve(u)[0]) for u in uris]
    return any(e is not None and e.probes for e in rows)


_CLASSES = {
    "VideoFileOutput": "video",
    "StreamFilesOutput": "video",
    "MosaicOutput": "mosaic",
    "DisplayOutput": "display",
    "HttpOutput": "web",
    "JsonlOutput": "jsonl",
    "EventsOutput": "events",
    "MqttOutput": "mqtt",
    "RtspOutput": "rtsp",
    "SnapshotsOutput": "snapshots",
    "ClipsOutput": "clips",
}
_lazy = lazy_names(__name__, _CLASSES)  # the sink classes, imported when first used


def __getattr__(name: str):
    if name in ("StoreOptions", "with_store"):  # the store's flag (apps/store), when first used
        from edgert.apps.store import sink

        return getattr(sink, name)
    return _lazy(name)


__all__ = [
    "SCHEMES",
    "MqttOptions",
    "Scheme",
    "Sink",
    "SinkContext",
    "SinkOptions",
    "check_sink",
    "frame_record",
    "from_flag",
    "grid_columns",
    "open_sink",
    "resolve",
    "shows_picture",
    "needs_frames",
    "view_rate",
    "forms",
    "listener",
    "serves_probes",
    "short_flags",
    "sink_paths",
    "tracks",
    *_CLASSES,
]
