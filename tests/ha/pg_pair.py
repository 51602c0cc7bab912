"""A private PostgreSQL primary with a streaming standby, for the failover tests.

Built from :class:`tests.private_services.PrivatePostgres` (``initdb`` into a temp dir as the
``postgres`` user, a free loopback port, ``fsync = off`` with its reasoning there): the shared
server is never touched, and every port and directory belongs to this run.

* the **primary**: ``wal_level = replica``, a physical replication slot for the standby, and —
  with ``synchronous=True`` — ``synchronous_standby_names = 'FIRST 1 (standby)'``, so a commit is
  acknowledged only once the standby has flushed its WAL (``synchronous_commit = on``);
  ``synchronous=False`` leaves the standby asynchronous (the setting PostgreSQL ships with).
* the **standby**: ``pg_basebackup -R`` (as the ``postgres`` user) from the primary into a temp
  dir of its own, started on its own free port, streaming from the slot, with
  ``application_name = standby`` in ``primary_conninfo`` (the name
  ``synchronous_standby_names`` and ``pg_stat_replication`` know it by).

:meth:`PrivatePostgresPair.url` is the multi-host URL every gapless process is given:
``postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/DB?target_session_attrs=read-write``.
Failover: :meth:`~PrivatePostgresPair.crash_primary` (``pg_ctl stop -m immediate``: every server
process of the primary quits at once), then :meth:`~PrivatePostgresPair.promote`.
:meth:`~PrivatePostgresPair.cut_replication` stops the standby's WAL receiver (its
``primary_conninfo`` emptied and reloaded), so everything the primary commits afterwards exists
on the primary only: with an asynchronous standby that is exactly what a failover loses, made
deterministic.

Fsync off on both servers keeps the tests honest for what they simulate — a crash of the server
processes, never of the operating system: what a server handed to the kernel stays readable.
The standby's flush acknowledges WAL written to its kernel, which the primary's crash does not
touch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from bench.harness import scalar
from gapless.ledger.migrations import migrate
from tests.helpers import wait_until
from tests.private_services import (
    STARTUP_S,
    PrivatePostgres,
    ServiceUnavailable,
    _unavailable,
)

#: The standby's name: its ``application_name``, and the name the primary waits for.
STANDBY_NAME = "standby"
SLOT = "gapless_standby"
#: The database every test of the pair clones from (migrated once, on the primary).
TEMPLATE = "gapless_template"


class PrivatePostgresPair:
    """A primary and its standby, each a :class:`PrivatePostgres` of its own.

    ``synchronous``: the primary waits for the standby at every commit. The roles swap on
    :meth:`promote`: ``primary`` is always the server that takes writes (or took them last),
    ``standby`` the other one.
    """

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary = PrivatePostgres()
        if not (self.primary.bin_dir / "pg_basebackup").is_file():
            self.primary.close()
            raise ServiceUnavailable(f"pg_basebackup not found beside initdb in "
                                     f"{self.primary.bin_dir}")
        self.standby: PrivatePostgres | None = None
        try:
            self.standby = PrivatePostgres()
        except BaseException:
            self.primary.close()
            raise
        #: The two ports in the order the URL lists them (the first primary first), fixed for
        #: the pair's life whatever the roles become.
        self.ports = (self.primary.port, self.standby.port)
        #: Seconds each part of the start took (to keep an eye on the tier's time).
        self.timings: dict[str, float] = {}

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        primary, standby = self.primary, self._standby
        primary.init()
        with (primary.data / "postgresql.conf").open("a") as conf:
            conf.write("""
# gapless tests: the primary of a pair (tests/ha/pg_pair.py)
wal_level = replica
max_wal_senders = 5
max_replication_slots = 5
wal_sender_timeout = 10s
""")
        self.timings["initdb"] = time.monotonic() - started
        primary.start()
        self.timings["primary up"] = time.monotonic() - started
        scalar(primary.url("postgres"),
             "SELECT pg_create_physical_replication_slot(%s)", (SLOT,))
        result = standby.run(
            "pg_basebackup", "-D", str(standby.data), "-h", "127.0.0.1",
            "-p", str(primary.port), "-U", PrivatePostgres.SUPERUSER, "-R", "-X", "stream",
            "-S", SLOT, "--checkpoint=fast", "--no-sync", timeout=STARTUP_S)
        if result.returncode != 0:
            raise ServiceUnavailable(f"pg_basebackup failed ({result.returncode}): "
                                     f"{(result.stderr or result.stdout)[-2000:]}")
        with (standby.data / "postgresql.conf").open("a") as conf:
            conf.write(f"""
# gapless tests: the standby of a pair (tests/ha/pg_pair.py)
port = {standby.port}
unix_socket_directories = '{standby.root}'
""")
        # postgresql.auto.conf is read last: this primary_conninfo (with the standby's name)
        # wins over the one pg_basebackup -R wrote above it.
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{self._primary_conninfo()}'\n"
                       f"primary_slot_name = '{SLOT}'\n")
        self.timings["base backup"] = time.monotonic() - started
        standby.start()
        if self.synchronous:
            # Only now: with no standby yet, every commit on the primary would wait for it.
            scalar(primary.url("postgres"), "ALTER SYSTEM SET synchronous_standby_names = "
                 f"'FIRST 1 ({STANDBY_NAME})'")
            scalar(primary.url("postgres"), "SELECT pg_reload_conf()")
        self.wait_streaming()
        self.timings["standby streaming"] = time.monotonic() - started
        migrate(primary.url(TEMPLATE), 0)
        self.wait_caught_up()
        self.timings["migrated"] = time.monotonic() - started

    def _primary_conninfo(self) -> str:
        return (f"host=127.0.0.1 port={self.primary.port} user={PrivatePostgres.SUPERUSER} "
                f"application_name={STANDBY_NAME}")

    @property
    def _standby(self) -> PrivatePostgres:
        assert self.standby is not None
        return self.standby

    # -- what a test reads -----------------------------------------------------------------------

    def url(self, database: str) -> str:
        """The multi-host URL of ``database``: both servers, the writable one chosen by libpq."""
        first, second = self.ports
        return (f"postgresql://{PrivatePostgres.SUPERUSER}@127.0.0.1:{first},127.0.0.1:{second}"
                f"/{database}?target_session_attrs=read-write")

    def primary_url(self, database: str = "postgres") -> str:
        return self.primary.url(database)

    def clone_template(self, name: str) -> str:
        """Database ``name``, cloned on the primary from the migrated template; its multi-host
        URL (every process of a test is given this)."""
        with psycopg.connect(self.primary_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.primary_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))

    def standby_url(self, database: str = "postgres") -> str:
        return self._standby.url(database)

    def sync_state(self) -> str | None:
        """The standby's ``sync_state`` in the primary's ``pg_stat_replication`` (None: not
        connected)."""
        value = scalar(self.primary_url(),
                     "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s "
                     "AND state = 'streaming'", (STANDBY_NAME,))
        return None if value is None else str(value)

    def in_recovery(self, server: PrivatePostgres) -> bool:
        return bool(scalar(server.url("postgres"), "SELECT pg_is_in_recovery()"))

    def wait_streaming(self, timeout: float = 30.0) -> None:
        """Until the primary sees the standby streaming (as ``sync`` when synchronous)."""
        wanted = "sync" if self.synchronous else "async"
        wait_until(lambda: self.sync_state() == wanted, timeout, interval=0.05,
                   message=f"the standby streaming ({wanted})")

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        target = scalar(self.primary_url(), "SELECT pg_current_wal_lsn()::text")

        def replayed() -> bool:
            return bool(scalar(self.standby_url(),
                             "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)))

        wait_until(replayed, timeout, interval=0.05, message=f"the standby to replay {target}")

    def received_lsn(self) -> str:
        """The WAL position the standby has received (and flushed) from the primary."""
        return str(scalar(self.standby_url(), "SELECT pg_last_wal_receive_lsn()::text"))

    # -- what a test does to the pair --------------------------------------------------------------

    def cut_replication(self, timeout: float = 30.0) -> str:
        """Stop the standby's WAL receiver and keep it stopped (``primary_conninfo`` emptied,
        configuration reloaded); returns the last position it received. Whatever the primary
        commits from now on, the standby never has."""
        scalar(self.standby_url(), "ALTER SYSTEM SET primary_conninfo = ''")
        scalar(self.standby_url(), "SELECT pg_reload_conf()")

        def gone() -> bool:
            receiving = scalar(self.standby_url(), "SELECT count(*) FROM pg_stat_wal_receiver")
            sending = scalar(self.primary_url(), "SELECT count(*) FROM pg_stat_replication")
            return receiving == 0 and sending == 0

        wait_until(gone, timeout, interval=0.05, message="the WAL receiver to stop")
        return self.received_lsn()

    def stop_standby(self) -> None:
        """A clean stop of the standby (a synchronous primary's commits then wait for it)."""
        self._standby.stop("fast")

    def start_standby(self) -> None:
        self._standby.start()
        self.wait_streaming()

    def crash_primary(self) -> float:
        """``pg_ctl stop -m immediate`` of the primary: its processes quit at once, no
        checkpoint, clients cut off mid-statement. Returns the seconds it took."""
        started = time.monotonic()
        self.primary.stop("immediate")
        return time.monotonic() - started

    def promote(self, timeout: float = 30.0) -> float:
        """``pg_ctl promote`` of the standby, then wait until it takes writes; the roles swap.
        Returns the seconds from the command to the first writable answer."""
        started = time.monotonic()
        standby = self._standby
        result = standby.pg_ctl("promote", "-w", "-t", str(int(timeout)), timeout=timeout + 10)
        if result.returncode != 0:
            raise AssertionError(f"pg_ctl promote failed: {result.stderr.strip()}\n"
                                 f"{standby.log_tail()}")
        wait_until(lambda: not self.in_recovery(standby), timeout, interval=0.05,
                   message="the promoted standby to leave recovery")
        self.primary, self.standby = standby, self.primary
        return time.monotonic() - started

    def log_of(self, server: PrivatePostgres) -> str:
        try:
            return server.log.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop both servers (by their own pids, if pg_ctl cannot) and remove their temp dirs."""
        try:
            if self.standby is not None:
                self.standby.close()
        finally:
            self.primary.close()


@contextlib.contextmanager
def running_pair(*, synchronous: bool) -> Iterator[PrivatePostgresPair]:
    """A started pair, closed afterwards; a skip with the reason (or a failure with
    GAPLESS_REQUIRE_PRIVATE_SERVICES=1) when a private server cannot start here."""
    pair: PrivatePostgresPair | None = None
    try:
        pair = PrivatePostgresPair(synchronous=synchronous)
        pair.start()
    except ServiceUnavailable as exc:
        if pair is not None:
            pair.close()
        _unavailable(str(exc))
    except BaseException:
        if pair is not None:
            pair.close()
        raise
    assert pair is not None
    try:
        yield pair
    finally:
        pair.close()


@pytest.fixture
def sync_pair() -> Iterator[PrivatePostgresPair]:
    """A fresh primary with a synchronous standby (the test may crash and promote it)."""
    with running_pair(synchronous=True) as pair:
        yield pair


@pytest.fixture
def async_pair() -> Iterator[PrivatePostgresPair]:
    """A fresh primary with an asynchronous standby (the test may crash and promote it)."""
    with running_pair(synchronous=False) as pair:
        yield pair
