"""URIs as edgert takes, checks and shows them, for the camera, telemetry and serve alike:

- :func:`redact`: a URI as it is printed, logged and served, its secrets replaced by ``***``;
- :func:`expand`: ``${EDGERT_...}`` replaced by that environment variable, so that a password
  need not be on the command line, where ``ps`` shows it to every local user;
- :func:`split` and :func:`check_stream_uri`: a URI's parts, or one sentence when it cannot be
  one (control characters that would go onto the wire or into the logs, no host, a bad port);
- :func:`host_port` and :func:`show_host`: ``host[:port]`` and ``[v6]:port`` read and printed;
- :func:`escape_controls`: any user string made safe for one line of a log;
- :func:`is_loopback` and :func:`warn_if_open`: the one rule for every listener edgert opens.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from edgert.runtime.errors import escape_controls

log = logging.getLogger("edgert")

# the names of query or path parameters whose values are secrets (a name holding one of these)
_KEYS = r"pass|pwd|token|secret|key|auth|sig|credential"
_SECRET_QUERY = re.compile(rf"([?&;][^=&;]*(?:{_KEYS})[^=&;]*=)[^&;]*", re.I)
# path forms some cameras use: .../user=admin_password=X_channel=1_stream=0.sdp (XMEye)
_SECRET_PATH = re.compile(rf"((?:^|[/_])[^=/_]*(?:{_KEYS})[^=/_]*=)[^_/]*", re.I)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
PREFIX = "EDGERT_"  # only these variables are read (a URI cannot pull in another's secret)


def redact(uri: str) -> str:
    """``uri`` as edgert prints, logs and serves it: a password (``user:pass@``, a query value
    such as ``password=``, ``token=``, ``sig=``, ``signature=``, ``credential=``, or a path form
    such as ``user=admin_password=X_channel=1``) replaced by ``***``, and control characters
    shown escaped (a CR/LF cannot forge a log line). Only the connection gets the real one."""
    uri = escape_controls(uri)
    scheme = _SCHEME.match(uri)
    if scheme is None:
        return uri
    rest = uri[scheme.end() :]
    # the credentials end at the last "@" (a password may hold "/", "?", "#" or "@"); an "@"
    # later in the URI makes this hide more than the password: printing only
    at = rest.rfind("@")
    if at >= 0 and ":" in rest[:at]:
        rest = rest[: rest.index(":")] + ":***" + rest[at:]
    path, q, query = rest.partition("?")
    path = _SECRET_PATH.sub(r"\1***", path)
    return scheme.group(0) + path + q + (_SECRET_QUERY.sub(r"\1***", "?" + query)[1:] if q else "")


def expand(text: str, option: str) -> str:
    """``text`` with each ``${EDGERT_NAME}`` replaced by that environment variable's value;
    ValueError (one sentence) for one that is not set or not ours."""

    def value(m: re.Match) -> str:
        name = m.group(1)
        if not name.startswith(PREFIX):
            raise ValueError(f"{option}: ${{{name}}}: only variables named {PREFIX}... are read")
        if name not in os.environ:
            raise ValueError(f"{option}: the environment variable {name} is not set")
        return os.environ[name]

    return _VAR.sub(value, text)


@dataclass(frozen=True)
class Parts:
    """A URI's parts as edgert reads them: the credentials end at the last "@"."""

    scheme: str  # lower case, without "://"
    userinfo: str  # "user:pass" as written (percent-encoded or not), "" for none
    host: str
    port: int | None
    path: str  # from the first "/" or "?" after the host, "" for none


def split(uri: str, need_host: bool = True, free: bool = False) -> Parts:
    """``uri``'s parts; ValueError (one sentence, secrets hidden) when it cannot be a URI: a
    control character or a space (a CR/LF would add a header to a request), no host (unless
    ``need_host`` is false), or a port outside 1..65535 (0 too where ``free``: a listener's)."""
    shown = redact(uri)
    bad = next((c for c in uri if not c.isprintable() or c.isspace()), None)
    if bad is not None:
        raise ValueError(
            f"'{shown}' is not a URI: it holds {bad!r} (spaces and control "
            "characters must be percent-encoded)"
        )
    scheme = _SCHEME.match(uri)
    if scheme is None:
        raise ValueError(f"'{shown}' is not a URI (scheme://host[:port]/path)")
    rest = uri[scheme.end() :]
    at, end = rest.rfind("@"), _authority_end(rest)
    try:
        host, port = host_port(rest[at + 1 : end], free=free)
    except ValueError as exc:
        raise ValueError(f"'{shown}': {exc}") from None
    if not host and need_host:
        raise ValueError(f"'{shown}' names no host (scheme://host[:port]/path)")
    return Parts(scheme.group(0)[:-3].lower(), rest[:at] if at >= 0 else "", host, port, rest[end:])


def credentials(parts: Parts) -> tuple[str | None, str | None]:
    """(user, password) of a URI's userinfo, percent-decoded as RFC 3986 writes them (``%40`` is
    "@", ``%3A`` ":"); (None, None) without one. ValueError for a user name holding ":" once
    decoded: Basic authentication (RFC 7617) cannot carry it."""
    from urllib.parse import unquote

    if not parts.userinfo:
        return None, None
    user, sep, password = parts.userinfo.partition(":")
    user = unquote(user)
    if ":" in user:
        raise ValueError(
            "the user name holds ':' (written %3A): Basic authentication cannot carry one"
        )
    return user, unquote(password) if sep else None


def without_credentials(uri: str) -> tuple[str, str | None, str | None]:
    """(the URI without its userinfo, user, password), the credentials percent-decoded: what a
    client that takes them apart (GStreamer's rtspsrc ``user-id`` / ``user-pw``) is given."""
    parts = split(uri)
    user, password = credentials(parts)
    return f"{parts.scheme}://{show_host(parts.host, parts.port)}{parts.path}", user, password


def encoded(uri: str) -> str:
    """``uri`` with its credentials percent-encoded as RFC 3986 writes userinfo: a password
    holding "#", "/", "?", "@" or ":" (as the environment gives it) reaches a client that parses
    URIs strictly (FFmpeg) whole. Credentials already encoded stay as they are."""
    from urllib.parse import quote

    bare, user, password = without_credentials(uri)
    if user is None:
        return uri
    scheme, rest = bare.split("://", 1)
    info = quote(user, safe="") + ("" if password is None else ":" + quote(password, safe=""))
    return f"{scheme}://{info}@{rest}"


def check_stream_uri(uri: str) -> None:
    """ValueError (one sentence, secrets hidden) when ``uri`` cannot be a network stream's URI
    (see :func:`split`)."""
    split(uri)


def _authority_end(rest: str) -> int:
    """Where the host[:port] ends: at the first "/" or "?" after the credentials' last "@"."""
    at = rest.rfind("@")
    start = at + 1 if at >= 0 else 0
    ends = [i for i in (rest.find("/", start), rest.find("?", start)) if i >= 0]
    return min(ends) if ends else len(rest)


def port_number(text: str, free: bool = False) -> int:
    """A port as written: a number from 1 to 65535, or 0 where ``free`` (a listener's: the system
    picks a free one); ValueError (one sentence) otherwise. The one port rule of every option and
    URI edgert takes."""
    low = 0 if free else 1
    text = text.strip()
    if not text.isdigit() or not low <= int(text) <= 65535:
        picks = " (0 picks a free one)" if free else ""
        raise ValueError(f"the port must be a number from {low} to 65535{picks}, not {text!r}")
    return int(text)


def host_port(text: str, default: int | None = None, free: bool = False) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` -> (host, port or ``default``);
    ValueError for a port that is not one (:func:`port_number`) or a bracket left open."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("an IPv6 address opened with '[' is not closed")
        host, tail = text[1:end], text[end + 1 :]
        if tail and not tail.startswith(":"):
            raise ValueError(f"{tail!r} after the IPv6 address is not a port")
        port_text = tail[1:] if tail else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") > 1:
        raise ValueError(f"write an IPv6 address in brackets: [{text}] or [ADDRESS]:PORT")
    else:
        host, port_text = text, ""
    if port_text == "":
        return host, default
    return host, port_number(port_text, free)


def show_host(host: str, port: int | None = None) -> str:
    """``host:port`` as a URI writes it: an IPv6 address in brackets."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine alone (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_open(option: str, host: str, port: int, authenticated: bool = False) -> bool:
    """The one rule for every listener edgert opens (``--metrics``, the web viewer, the RTSP
    re-stream, serve's ports): on an address other than loopback, a warning that whoever reaches
    it is answered (with no password unless ``authenticated``). Whether it warned."""
    if is_loopback(host):
        return False
    who = "anyone who can reach this address" + (
        "" if authenticated else ", without authentication"
    )
    log.warning(
        "%s on %s: answers %s (give 127.0.0.1 to keep it on this machine)",
        option,
        show_host(host, port),
        who,
    )
    return True
