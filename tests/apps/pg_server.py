"""A PostgreSQL server of the tests' own (Debian's ``postgresql``, which .ci/run installs):
``initdb`` into a temporary folder and ``postgres`` on a free loopback port, its socket in that
folder. PostgreSQL refuses to run as root (CI and the developers' machines run as root): it runs
as ``nobody`` then, the folder handed to it. Password authentication over TCP (SCRAM), the
password given to edgert through ``${EDGERT_PG_PASSWORD}``."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.ports import free_ports

USER, PASSWORD = "edgert", "s3cret#pg/pw"


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return versions[-1] if versions else None


needs_postgres = pytest.mark.skipif(
    not os.environ.get("CI")
    and (_bin("initdb") is None or _bin("postgres") is None or find_spec("psycopg") is None),
    reason="Debian's postgresql (.ci/run installs it) and psycopg (edgert[postgres]) are needed",
)


def _as_user() -> list:
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


class PgServer:
    def __init__(self) -> None:
        # a folder of its own under /tmp (pytest's are private to root: nobody cannot enter)
        self.folder = folder = Path(tempfile.mkdtemp(prefix="edgert-pg-"))
        self.port = free_ports(1)[0]
        pwfile = folder / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            os.chmod(folder, 0o755)
            for p in (folder, pwfile):
                shutil.chown(p, "nobody", "nogroup")
        subprocess.run(
            [*_as_user(), _bin("initdb"), "-D", str(folder / "data"), "-U", USER]
            + [
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*_as_user(), _bin("postgres"), "-D", str(self.folder / "data"), "-k", str(self.folder)]
            + ["-p", str(self.port), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "log", "ab"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            import socket

            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                raise AssertionError((self.folder / "log").read_text()[-2000:])
            time.sleep(0.1)
        raise AssertionError(f"postgres did not listen on {self.port}")

    def stop(self) -> None:
        """A fast shutdown (SIGINT): the connections are cut, as a server going away cuts them."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(30)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def uri(self, db: str = "postgres", **query) -> str:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://{USER}:${{EDGERT_PG_PASSWORD}}@127.0.0.1:{self.port}/{db}" + (
            f"?{q}" if q else ""
        )

    def sql(self, statement: str) -> list:
        """``statement``'s rows, through the driver (the test's own connection)."""
        import psycopg

        with psycopg.connect(
            f"postgresql://{USER}@127.0.0.1:{self.port}/postgres", password=PASSWORD
        ) as conn:
            return conn.execute(statement).fetchall()
