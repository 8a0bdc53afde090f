"""Why an RTSP camera would not open, asked of the camera itself: OpenCV's FFmpeg back end says
only that it could not open a stream, where GStreamer's rtspsrc says "Unauthorized". One
``DESCRIBE`` (RFC 2326), with the credentials as the camera asks for them (Basic, or Digest
with MD5, RFC 2617), tells a refused password from a camera that does not answer, so that both
decoders say the same thing."""

from __future__ import annotations

import base64
import hashlib
import re
import socket

from edgert.apps.uris import split, without_credentials

UNAUTHORIZED = "Unauthorized: the camera refused the user name and password"


def _request(sock, url: str, cseq: int, auth: str | None) -> tuple[int, dict]:
    head = f"DESCRIBE {url} RTSP/1.0\r\nCSeq: {cseq}\r\nAccept: application/sdp\r\n"
    if auth:
        head += f"Authorization: {auth}\r\n"
    sock.sendall((head + "\r\n").encode("latin-1"))
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = lines[0].split()
    if len(status) < 2 or not status[0].startswith("RTSP/") or not status[1].isdigit():
        raise OSError("not an RTSP answer")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    return int(status[1]), headers


def _digest(challenge: str, user: str, password: str, url: str) -> str | None:
    fields = dict(re.findall(r'(\w+)="?([^",]*)"?', challenge))
    if "nonce" not in fields or fields.get("algorithm", "MD5").upper() != "MD5":
        return None
    md5 = lambda text: hashlib.md5(text.encode("latin-1")).hexdigest()  # noqa: E731, S324
    ha1 = md5(f"{user}:{fields.get('realm', '')}:{password}")
    ha2 = md5(f"DESCRIBE:{url}")
    parts = f'username="{user}", realm="{fields.get("realm", "")}", nonce="{fields["nonce"]}", '
    if "auth" in fields.get("qop", "").split(","):
        cnonce, nc = "0a4f113b", "00000001"
        response = md5(f"{ha1}:{fields['nonce']}:{nc}:{cnonce}:auth:{ha2}")
        parts += f'uri="{url}", qop=auth, nc={nc}, cnonce="{cnonce}", response="{response}"'
    else:
        response = md5(f"{ha1}:{fields['nonce']}:{ha2}")
        parts += f'uri="{url}", response="{response}"'
    return "Digest " + parts


def why_not(uri: str, timeout_s: float) -> str | None:
    """What the camera at ``uri`` (rtsp://) says to a DESCRIBE with its credentials:
    :data:`UNAUTHORIZED` when it refuses them, ``"the camera answered NNN"`` for another error,
    None when it accepts them or cannot be asked (no answer: the caller's own words stand)."""
    try:
        parts = split(uri)
        url, user, password = without_credentials(uri)
    except ValueError:
        return None
    if parts.scheme != "rtsp":
        return None
    try:
        with socket.create_connection((parts.host, parts.port or 554), timeout=timeout_s) as s:
            code, headers = _request(s, url, 1, None)
            if code == 401 and user is not None:
                challenge = headers.get("www-authenticate", "")
                if challenge.lower().startswith("digest"):
                    auth = _digest(challenge, user, password or "", url)
                else:
                    raw = f"{user}:{password or ''}".encode()
                    auth = "Basic " + base64.b64encode(raw).decode()
                if auth is None:
                    return None
                code, _ = _request(s, url, 2, auth)
    except (OSError, ValueError):
        return None
    if code == 401:
        return UNAUTHORIZED if user is not None else "Unauthorized: the camera wants a password"
    if code >= 400:
        return f"the camera answered {code}"
    return None
