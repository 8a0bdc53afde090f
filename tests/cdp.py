"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
messages of JSON, each ended by a NUL, the browser reading fd 3 and writing fd 4): open a page,
run JavaScript in it (clicks, reading the DOM, a video's state), take a screenshot. No port is
opened and no library beyond the standard one is needed."""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time


class Browser:
    """One headless Chromium with one page (its ``profile``: a folder of its own)."""

    def __init__(self, chromium: str, flags: list, profile, width: int = 1280, height: int = 1000):
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()

        def fds() -> None:  # the child's fd 3 reads our messages, its fd 4 writes its answers
            import fcntl

            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [
                chromium,
                *flags,
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--autoplay-policy=no-user-gesture-required",
                "about:blank",
            ],
            preexec_fn=fds,
            pass_fds=(3, 4, to_child, from_child),  # kept open past the preexec's dup2s
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buf, self._id, self.session = b"", 0, None
        pages = [t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        target = (
            pages[0]["targetId"]
            if pages
            else self.call("Target.createTarget", url="about:blank")["targetId"]
        )
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def call(self, method: str, timeout: float = 30.0, **params) -> dict:
        """The result of one protocol command (RuntimeError with its error)."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session is not None and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                got = json.loads(raw)
                if got.get("id") == self._id:
                    if "error" in got:
                        raise RuntimeError(f"{method}: {got['error']}")
                    return got.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError(f"{method}: no answer in {timeout} s")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError(f"{method}: the browser closed its pipe")
            self._buf += chunk

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def js(self, expression: str, timeout: float = 30.0):
        """The value of ``expression`` in the page (a promise awaited)."""
        got = self.call(
            "Runtime.evaluate",
            timeout,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression[:80]}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def wait(self, expression: str, timeout: float = 30.0, every: float = 0.2):
        """The first truthy value of ``expression``, polled (an error in it, as while the page
        loads, counts as not yet); TimeoutError with the last one."""
        deadline, value = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                value = self.js(expression)
            except RuntimeError as exc:  # the page is not there yet (navigating)
                value = exc
            if value and not isinstance(value, RuntimeError):
                return value
            time.sleep(every)
        raise TimeoutError(f"{expression[:120]} stayed {value!r} for {timeout} s")

    def screenshot(self, path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            os.close(self._w)
            os.close(self._r)
        except OSError:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
