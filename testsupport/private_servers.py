"""Throwaway PostgreSQL and MariaDB servers of a test's own, which it may stop and start at will.

The shared servers on 5432 and 3306 serve every other test running on the machine, so a test
that needs a database to go down starts one of these instead::

    with private_server("postgres") as server:
        engine = sa.create_engine(server.url)
        ...
        server.stop()   # the database is down
        server.start()  # and back, same data, same port

Each lives in a temporary directory on a free local port and is removed when the block ends.
Missing server binaries are an error naming what to install, never a skip. PostgreSQL runs
as the ``postgres`` OS user when the tests run as root (it refuses to run as root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

START_TIMEOUT = 30.0


class PrivateServerError(RuntimeError):
    """A private server could not be set up, started or stopped."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _run(command: list[str], what: str, **kwargs: object) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise PrivateServerError(
            f"{what} failed (exit {result.returncode}): {' '.join(command)}\n{result.stdout}\n{result.stderr}"
        )


class PrivateServer:
    """One server process; ``url`` names its ``test`` database. Use :func:`private_server`."""

    dialect: str
    port: int
    url: str

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def remove(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return _port_open(self.port)

    def _wait_accepting(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        last: Exception | None = None
        engine = sa.create_engine(self.url, poolclass=sa.NullPool)
        try:
            while time.monotonic() < deadline:
                try:
                    with engine.connect() as connection:
                        connection.exec_driver_sql("SELECT 1")
                    return
                except sa.exc.DBAPIError as exc:
                    last = exc
                    time.sleep(0.1)
        finally:
            engine.dispose()
        raise PrivateServerError(f"{self.dialect} on port {self.port} did not accept connections: {last}")


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise PrivateServerError(
            "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/pg_ctl): install the Debian "
            "package postgresql to run this test"
        )
    return Path(found[-1]).parent


class PrivatePostgres(PrivateServer):
    dialect = "postgres"

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="ekbatan-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        # PostgreSQL refuses to run as root: hand the directory to the postgres user.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.root, "postgres", "postgres")
        _run(
            [*self._as, str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust"],
            "initdb",
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        _run(
            [*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
             str(self.root / "log"), "-w", "start"],
            "starting PostgreSQL",
        )  # fmt: skip
        self._wait_accepting()

    def stop(self) -> None:
        # immediate: the clients' connections die as they would when a server crashes
        _run([*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
             "stopping PostgreSQL")  # fmt: skip

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(PrivateServerError):
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateMariaDB(PrivateServer):
    dialect = "mariadb"

    def __init__(self) -> None:
        self.server = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin")
        install = shutil.which("mariadb-install-db")
        if self.server is None or install is None:
            raise PrivateServerError(
                "no MariaDB server binaries (mariadbd, mariadb-install-db): install the Debian package "
                "mariadb-server to run this test"
            )
        self.root = Path(tempfile.mkdtemp(prefix="ekbatan-mariadb-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"mariadb+pymysql://root@127.0.0.1:{self.port}/test"
        self._process: subprocess.Popen[bytes] | None = None
        user = ["--user=root"] if os.geteuid() == 0 else []
        _run(
            [install, "--no-defaults", f"--datadir={self.data}", *user, "--auth-root-authentication-method=normal",
             "--skip-test-db", "--skip-name-resolve"],
            "mariadb-install-db",
        )  # fmt: skip

    def start(self) -> None:
        user = ["--user=root"] if os.geteuid() == 0 else []
        assert self.server is not None
        log = open(self.root / "log", "ab")  # noqa: SIM115 - the server writes to it while it runs
        self._process = subprocess.Popen(
            [self.server, "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.root / 'sock'}", f"--pid-file={self.root / 'pid'}",
             "--skip-grant-tables", "--skip-name-resolve", "--innodb-buffer-pool-size=32M",
             "--skip-log-bin", *user],
            stdout=log,
            stderr=log,
        )  # fmt: skip
        log.close()
        try:
            self._wait_accepting_server()
        except BaseException:
            self.stop()
            raise

    def _wait_accepting_server(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not _port_open(self.port):
            if self._process is not None and self._process.poll() is not None:
                log = (self.root / "log").read_text(errors="replace")[-2000:]
                raise PrivateServerError(f"mariadbd exited with {self._process.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise PrivateServerError(f"mariadbd did not open port {self.port} in {START_TIMEOUT:.0f}s")
            time.sleep(0.1)
        admin = sa.create_engine(self.url.rsplit("/", 1)[0] + "/", poolclass=sa.NullPool)
        try:
            with admin.connect() as connection:
                connection.exec_driver_sql("CREATE DATABASE IF NOT EXISTS test")
        finally:
            admin.dispose()
        self._wait_accepting()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.kill()  # as a crash: the clients' connections die mid-statement
        process.wait(timeout=30)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_server(dialect: str, *, started: bool = True) -> Iterator[PrivateServer]:
    """A private ``postgres`` or ``mariadb`` server, running unless ``started=False``; removed afterwards."""
    server: PrivateServer
    if dialect == "postgres":
        server = PrivatePostgres()
    elif dialect == "mariadb":
        server = PrivateMariaDB()
    else:
        raise ValueError(f"no private server for dialect {dialect!r}; use postgres or mariadb")
    try:
        if started:
            server.start()
        yield server
    finally:
        server.remove()
