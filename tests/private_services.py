"""Private PostgreSQL and RabbitMQ servers that a test may stop, crash and restart.

The shared servers (``GAPLESS_DATABASE_URL`` / ``GAPLESS_AMQP_URL``) are used by every engineer
and every other test on the machine: nothing may ever restart them. Tests that need a server to
go away start their own instead, on free loopback ports, with every file in a temporary
directory that is removed afterwards.

:class:`PrivatePostgres`
    ``initdb`` into a temp dir (as the ``postgres`` user when the tests run as root, since
    initdb refuses root), trust authentication on 127.0.0.1 only, the Unix socket inside the temp
    dir. :meth:`~PrivatePostgres.stop` takes pg_ctl's shutdown mode: ``fast`` (clients are
    disconnected, a shutdown checkpoint is written) or ``immediate`` (every server process quits
    at once, no checkpoint: a crash, and the next start runs crash recovery from the WAL).

    ``fsync = off``, and why that keeps the crash honest: fsync only orders the kernel to put
    written data on the disk. An immediate stop kills the *server processes*, not the operating
    system; everything they had handed to the kernel with ``write()`` stays in the page cache and
    is what the restarted server reads. With ``synchronous_commit = on`` (set explicitly; it is
    the default) a backend writes its commit record to the WAL before it tells the client the
    transaction committed, so every commit a client saw survives an immediate stop — exactly as
    with fsync on. What fsync = off gives up is durability through an OS crash or power loss,
    which no test here simulates. ``synchronous_commit = off`` would *not* be safe: commits
    acknowledged from WAL buffers still in shared memory would vanish with the crash.

:class:`PrivateRabbitMQ`
    A node of its own (name, AMQP port, distribution port, Erlang cookie, data/log dirs, and its
    own ``epmd`` on a free port, so even the shared node's name registry is untouched), no
    plugins (no management listener to clash with the shared node's), the guest user allowed
    from loopback. :meth:`~PrivateRabbitMQ.restart` is a *full* restart: ``rabbitmqctl
    shutdown`` (the Erlang VM exits; the test waits for the process to be gone), then a new
    server process on the same data directory, so durable queues and persistent messages come
    back from disk. Several nodes may share one cookie and one :class:`PrivateEpmd` (a private
    cluster, tests/ha/rabbit_cluster.py); a node alone has both to itself.

Both raise :class:`ServiceUnavailable` when their binaries are missing or the server does not
come up before a deadline; the fixtures turn that into a skip with the reason (or a failure when
``GAPLESS_REQUIRE_PRIVATE_SERVICES=1``, for CI machines that must run these tests). Cleanup
(``close``) stops whatever still runs — by the process ids the fixture started, never by name —
and removes the temp dir, also when the test failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import string
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, NoReturn, Protocol, TypeVar

import pytest

from bench import harness
from bench.harness import (
    ServiceUnavailable,
    amqp_listening,
    epmd_binary,
    kill_group,
    rabbitmq_scripts,
    tail,
)
from tests.helpers import free_port, text_after, wait_until

#: How long a private server may take to come up (the machine is small and shared).
STARTUP_S = 60.0
#: How long a graceful stop may take before the processes are killed.
STOP_S = 60.0
#: Temp dirs are named like this, so a leftover of a killed test run is easy to spot.
TEMP_PREFIX = "gapless-private-"

ShutdownMode = Literal["fast", "immediate"]
#: ``shutdown``: ``rabbitmqctl shutdown`` (graceful; the VM exits). ``kill``: SIGKILL of the
#: node's process group (a crash: nothing is flushed or closed).
RabbitStopMode = Literal["shutdown", "kill"]


class _Closable(Protocol):
    def close(self) -> None: ...


_Server = TypeVar("_Server", bound=_Closable)


# ------------------------------------------------------------------------------------ PostgreSQL


class PrivatePostgres(harness.PrivatePostgres):
    """A PostgreSQL server of one test session, in a temp dir, on a free port (bench/harness.py's,
    which the tests may also stop, crash and restart)."""

    def __init__(self) -> None:
        super().__init__(programs=("initdb", "pg_ctl"), temp_prefix=TEMP_PREFIX)

    def stop(self, mode: ShutdownMode = "fast") -> None:
        """``pg_ctl stop -m fast`` (clean) or ``-m immediate`` (a crash of the server)."""
        result = self.pg_ctl("stop", "-w", "-m", mode, "-t", str(int(STOP_S)), timeout=STOP_S)
        if result.returncode != 0:
            raise AssertionError(f"pg_ctl stop -m {mode} failed: {result.stderr.strip()}\n"
                                 f"{tail(self.log)}")

    def restart(self, mode: ShutdownMode = "fast") -> None:
        """``pg_ctl restart -m MODE``: stop and start at once (for a deliberate outage, call
        :meth:`stop` and :meth:`start` with the wait in between)."""
        result = self.pg_ctl("restart", "-w", "-m", mode, "-t", str(int(STARTUP_S)),
                             timeout=STOP_S + STARTUP_S)
        if result.returncode != 0:
            raise AssertionError(f"pg_ctl restart -m {mode} failed: {result.stderr.strip()}\n"
                                 f"{tail(self.log)}")

    def running(self) -> bool:
        return self.pg_ctl("status", timeout=30).returncode == 0

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log, lines)


# -------------------------------------------------------------------------------------- RabbitMQ


@dataclass
class RestartTiming:
    """How long the parts of a restart took, in seconds."""

    stop_s: float
    start_s: float

    @property
    def down_s(self) -> float:
        return self.stop_s + self.start_s


class PrivateEpmd:
    """An ``epmd`` (the Erlang node-name registry) of its own on a free loopback port: private
    nodes register there, never with the machine's epmd on 4369. Several nodes of one private
    cluster share one."""

    def __init__(self) -> None:
        self.bin = epmd_binary()
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """Its process id, while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def running(self) -> bool:
        return self.pid is not None

    def start(self) -> None:
        """Start it (once) and wait until it listens."""
        if self.running():
            return
        process = self._process = subprocess.Popen(
            [str(self.bin), "-port", str(self.port), "-address", "127.0.0.1"],
            cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)

        def up() -> bool:
            if process.poll() is not None:
                raise ServiceUnavailable(f"epmd exited at start ({process.returncode})")
            with socket.socket() as sock:
                sock.settimeout(0.2)
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        wait_until(up, 20, message="the private epmd to listen")

    def close(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def random_cookie() -> str:
    return "".join(secrets.choice(string.ascii_uppercase) for _ in range(20))


class PrivateRabbitMQ:
    """A RabbitMQ node of one test session: its own name, ports, cookie, epmd and data dir.

    ``node``, ``cookie`` and ``epmd`` let several nodes form a cluster: the same cookie, one
    epmd (started by the first node that needs it, closed by its owner, not by the nodes), and
    ``config`` adds lines to rabbitmq.conf (peer discovery, for one).
    """

    def __init__(self, *, node: str | None = None, cookie: str | None = None,
                 epmd: PrivateEpmd | None = None, config: str = "") -> None:
        self.server_script, self.ctl_script = rabbitmq_scripts()
        self.epmd = epmd if epmd is not None else PrivateEpmd()
        self._owns_epmd = epmd is None
        self.root = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}rabbitmq-"))
        self.port = free_port()
        self.dist_port = free_port()
        self.node = node or f"gapless-test-{secrets.token_hex(4)}@localhost"
        self.log = self.root / "server.log"
        self._server: subprocess.Popen[bytes] | None = None
        self._server_log: IO[bytes] | None = None
        self.env = self._environment(cookie or random_cookie(), config)

    @property
    def epmd_port(self) -> int:
        return self.epmd.port

    def _environment(self, cookie: str, config: str) -> dict[str, str]:
        root = self.root
        (root / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "loopback_users.guest = true\n"
            "log.console = false\n"
            "log.file.level = info\n"
            f"{config}")
        (root / "enabled_plugins").write_text("[].\n")  # no management listener
        (root / "rabbitmq-env.conf").write_text("")  # not the system's /etc/rabbitmq one
        cookie_file = root / ".erlang.cookie"
        cookie_file.write_text(cookie)
        cookie_file.chmod(0o400)
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": str(root),  # the Erlang cookie of the node and of rabbitmqctl
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_CONF_ENV_FILE": str(root / "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(root / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"),
            "RABBITMQ_PID_FILE": str(root / "rabbitmq.pid"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(root / "plugins-expand"),
        })
        return env

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def server_pid(self) -> int | None:
        """The pid of the server process (the script that runs the Erlang VM), while it runs."""
        server = self._server
        return server.pid if server is not None and server.poll() is None else None

    def start(self) -> float:
        """Start the node and wait until it speaks AMQP; the seconds that took."""
        self.epmd.start()
        if self._server_log is None:
            self._server_log = self.log.open("ab")
        started = time.monotonic()
        # Its own session: the process group (the script, the Erlang VM and its helpers) can be
        # killed as one if a graceful stop fails.
        server = self._server = subprocess.Popen(
            [str(self.server_script)], env=self.env, cwd=self.root, stdin=subprocess.DEVNULL,
            stdout=self._server_log, stderr=subprocess.STDOUT, start_new_session=True)

        def up() -> bool:
            if server.poll() is not None:
                raise ServiceUnavailable(
                    f"private RabbitMQ exited at start ({server.returncode}):\n"
                    f"{self.log_tail()}")
            return amqp_listening(self.port)

        try:
            wait_until(up, STARTUP_S, interval=0.1, message="the private RabbitMQ node")
        except AssertionError:
            raise ServiceUnavailable(f"private RabbitMQ did not come up within {STARTUP_S:g}s:"
                                     f"\n{self.log_tail()}") from None
        return time.monotonic() - started

    def ctl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``rabbitmqctl -n NODE ARGS`` against this node."""
        return subprocess.run([str(self.ctl_script), "-n", self.node, *args], env=self.env,
                              cwd=self.root, capture_output=True, text=True, timeout=timeout,
                              check=False)

    def stop(self, mode: RabbitStopMode = "shutdown") -> float:
        """Stop the node; returns once the server process is gone (the seconds that took).

        ``shutdown``: ``rabbitmqctl shutdown``, the node stops and its Erlang VM exits.
        ``kill``: SIGKILL to the node's process group, a crash. Either way the data directory
        stays, and :meth:`start` brings the same node back from it.
        """
        server = self._server
        if server is None or server.poll() is not None:
            return 0.0
        started = time.monotonic()
        if mode == "kill":
            kill_group(server.pid)
            server.wait(timeout=STOP_S)
            return time.monotonic() - started
        result = self.ctl("shutdown", timeout=STOP_S)
        try:
            server.wait(timeout=STOP_S if result.returncode == 0 else 5)
        except subprocess.TimeoutExpired:
            kill_group(server.pid)
            server.wait(timeout=10)
            raise AssertionError(f"rabbitmqctl shutdown did not stop the node "
                                 f"({result.returncode}: {result.stderr.strip()})") from None
        return time.monotonic() - started

    def restart(self, mode: RabbitStopMode = "shutdown") -> RestartTiming:
        """A full restart: the node process goes away, then a new one runs on the same data."""
        stop_s = self.stop(mode)
        return RestartTiming(stop_s, self.start())

    def log_tail(self, lines: int = 25) -> str:
        return f"{tail(self.log, lines)}\n{tail(self.node_log, lines)}"

    @property
    def node_log(self) -> Path:
        return self.root / "log" / f"{self.node}.log"

    def node_log_size(self) -> int:
        return self.node_log.stat().st_size if self.node_log.exists() else 0

    def durable_classic_queues(self) -> list[str]:
        """The names of the node's durable classic queues (``rabbitmqctl list_queues``)."""
        result = self.ctl("list_queues", "--quiet", "--no-table-headers", "durable", "type",
                          "name")
        if result.returncode != 0:
            raise AssertionError(f"rabbitmqctl list_queues failed: {result.stderr.strip()}")
        rows = (line.split(None, 2) for line in result.stdout.splitlines() if line.strip())
        return sorted(row[2] for row in rows if row[:2] == ["true", "classic"])

    def recovered_classic_queues(self, since: int, timeout: float = 20.0) -> int | None:
        """How many classic queues the node said it recovered at its last boot, reading its log
        from byte ``since`` (the log's size before that boot). The node writes its log a little
        later than it boots: this waits for the line; None if it does not come (a RabbitMQ
        that words its log otherwise)."""
        found: list[str] = []

        def said() -> bool:
            found[:] = re.findall(r"Recovering (\d+) queues of type rabbit_classic_queue",
                                  text_after(self.node_log, since))
            return bool(found)

        try:
            wait_until(said, timeout, interval=0.2, message="the node's log of its queue recovery")
        except AssertionError:
            return None
        return int(found[-1])

    def close(self) -> None:
        """Stop the node (gracefully if it answers, else by killing its process group), stop
        its private epmd (if it is the node's own), close the log and remove the temp dir."""
        try:
            server = self._server
            if server is not None and server.poll() is None:
                try:
                    self.stop()
                except (AssertionError, subprocess.SubprocessError, OSError):
                    if server.poll() is None:  # not reaped: the group id is still ours
                        kill_group(server.pid)
                    with contextlib.suppress(subprocess.SubprocessError):
                        server.wait(timeout=10)
            if self._owns_epmd:
                self.epmd.close()
        finally:
            if self._server_log is not None:
                self._server_log.close()
            shutil.rmtree(self.root, ignore_errors=True)


# -------------------------------------------------------------------------------------- fixtures


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("GAPLESS_REQUIRE_PRIVATE_SERVICES", "") == "1":
        pytest.fail(f"private service required but unavailable: {reason}")
    pytest.skip(f"private service unavailable: {reason}")


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL server, started once per session; tests may stop and restart it
    (and must leave it running)."""

    def init_and_start(server: PrivatePostgres) -> None:
        server.init()
        server.start()

    yield from _serving(PrivatePostgres, init_and_start)


@pytest.fixture(scope="session")
def private_rabbitmq() -> Iterator[PrivateRabbitMQ]:
    """A private RabbitMQ node, started once per session; tests may restart it (and must leave
    it running)."""
    yield from _serving(PrivateRabbitMQ, PrivateRabbitMQ.start)


def _serving(make: Callable[[], _Server], start: Callable[[_Server], object]) -> Iterator[_Server]:
    """Make and start a server, skip (or fail, see ``_unavailable``) when it cannot start,
    yield it, and close it after."""
    server: _Server | None = None
    try:
        server = make()
        start(server)
    except BaseException as exc:
        if server is not None:  # whatever did start is stopped, whatever the failure
            server.close()
        if isinstance(exc, ServiceUnavailable):
            _unavailable(str(exc))
        raise
    try:
        yield server
    finally:
        server.close()
