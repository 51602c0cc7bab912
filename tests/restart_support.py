"""A run of workers and recovery under load while a server goes away: the processes, the load
(every invoice republished until the broker confirms it), the feed poller, and what they saw.

Shared by the service-restart scenarios (tests/acceptance/test_service_restarts.py) and the
high-availability tier (tests/ha), which take servers away in different ways and check the same
invariants with the chaos checker afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher, PublishNacked, PublishUnconfirmed
from gapless.amqp.topology import work_queues
from gapless.ledger.database import make_engine
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.chaos.checker import History
from tests.chaos.scenario import Poller, read_dead_letters
from tests.helpers import GaplessProcess, ledger, text_after, wait_until
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes, message

#: Publishes awaiting their confirm at once.
PUBLISH_WINDOW = 20
#: Wait before republishing an unconfirmed message (a client's retry backoff).
REPUBLISH_BACKOFF_S = 0.5
#: Give up republishing a message after this long.
PUBLISH_DEADLINE_S = 60.0

#: Short leases so that an invoice whose outcome was lost in the outage is settled in-run.
PROCESS_ENV = {"GAPLESS_LEASE_S": "3", "GAPLESS_INTEGRATOR_TIMEOUT_S": "5",
               "GAPLESS_LOG_LEVEL": "info"}
RECOVERY_ARGS = ("--interval", "1", "--stuck-after", "3", "--backoff-base", "1",
                 "--backoff-max", "3", "--max-attempts", "1000", "--drain-timeout", "10")

#: Log events by which a process shows it met the outage (any one of them, per process).
DATABASE_TROUBLE = ("database_unavailable", "outcome_write_retry", "recovery_round_failed",
                    "orphan_failed")
BROKER_TROUBLE = ("amqp_connection_lost",)


@dataclass
class Outage:
    """What the scenario did to a server, and what it saw."""

    kind: str
    stopped_after_issued: int = 0
    seconds: float = 0.0
    noticed_by: list[str] = field(default_factory=list)


class RestartRun:
    """One scenario: the processes, the load, the poller, and what they recorded."""

    def __init__(self, settings: Settings, mock: MockIntegratorClient, log_dir: Path, *,
                 process_env: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.mock = mock
        env = {key: value for key, value in os.environ.items()
               if not key.startswith("GAPLESS_")}
        env.update({
            "GAPLESS_DATABASE_URL": settings.database_url,
            "GAPLESS_AMQP_URL": settings.amqp_url,
            "GAPLESS_QUEUE": settings.queue,
            "GAPLESS_QUEUE_TYPE": settings.queue_type,
            "GAPLESS_CLUSTER_ID": "0",
            "GAPLESS_INTEGRATOR_URL": mock.url,
            "GAPLESS_LOG_FORMAT": "json",
            **PROCESS_ENV,
            **(process_env or {}),
        })
        self.processes = Processes(env, log_dir)
        self.workers: list[GaplessProcess] = []
        self.recovery: GaplessProcess | None = None
        self.engine: AsyncEngine = make_engine(settings.database_url, actor="test",
                                               application_name="gapless-restart-test",
                                               pool_size=2)
        self.poller = Poller(settings.database_url)
        self.publisher = Publisher(settings, confirm_timeout=10)
        self.history = History()
        self.counts: Counter[str] = Counter()
        self._poller_stop = asyncio.Event()
        self._poller_task: asyncio.Task[None] | None = None

    @property
    def all_processes(self) -> list[GaplessProcess]:
        return [*self.workers, *([self.recovery] if self.recovery else [])]

    async def start(self) -> None:
        async with ledger(self.engine).transaction() as tx:
            await add_series(tx, build_series_spec("acme", "ABC"))
        self.mock.set_faults(latency_ms=[20, 50])
        await self.publisher.start()  # declares the topology before any worker consumes
        self.workers = [self.processes.start(f"worker-{n}", ["worker", "--concurrency", "8",
                                                             "--shutdown-timeout", "10"])
                        for n in range(2)]
        self.recovery = self.processes.start("recovery", ["recovery", *RECOVERY_ARGS])

        def all_ready() -> bool:
            for proc in self.all_processes:
                assert proc.alive(), proc.output()[-3000:]
            return all(logged(w, "worker_started") for w in self.workers) and \
                logged(self.recovery, "recovery_round_started")

        await asyncio.to_thread(wait_until, all_ready, 60, message="workers and recovery")
        self._poller_task = asyncio.create_task(self.poller.follow(self._poller_stop))

    # -- load ----------------------------------------------------------------------------------

    async def publish(self, invoice_ids: list[str]) -> None:
        """Publish each invoice until the broker confirms it, PUBLISH_WINDOW at a time."""
        window = asyncio.Semaphore(PUBLISH_WINDOW)

        async def one(invoice_id: str) -> None:
            async with window:
                await self._publish_confirmed(invoice_id)

        await asyncio.gather(*(one(invoice_id) for invoice_id in invoice_ids))

    async def _publish_confirmed(self, invoice_id: str) -> None:
        deadline = time.monotonic() + PUBLISH_DEADLINE_S
        body = message(invoice_id)
        while True:
            self.counts["publish attempts"] += 1
            try:
                await self.publisher.publish(body)
            except (PublishUnconfirmed, PublishNacked):  # a client retries both
                self.counts["publishes unconfirmed (retried)"] += 1
                if time.monotonic() > deadline:
                    raise AssertionError(f"{invoice_id}: no confirm for "
                                         f"{PUBLISH_DEADLINE_S:g}s") from None
                await asyncio.sleep(REPUBLISH_BACKOFF_S)  # a client's retry backoff
                continue
            self.history.publish(invoice_id, "acme", "ABC", "issued")
            return

    # -- observations ----------------------------------------------------------------------------

    async def scalar(self, query: str) -> int:
        async with self.engine.connect() as conn:
            return int((await conn.execute(text(query))).scalar_one())

    async def published_without_row(self) -> list[str]:
        """The confirmed publishes of which the database has no invoice (yet)."""
        async with self.engine.connect() as conn:
            rows = {invoice_id for (invoice_id,) in await conn.execute(
                text("SELECT invoice_id FROM invoices"))}
        return [invoice_id for invoice_id in self.history.published if invoice_id not in rows]

    async def issued(self) -> int:
        return await self.scalar("SELECT count(*) FROM invoices WHERE status = 'ISSUED'")

    async def settled(self) -> bool:
        """Every confirmed publish ISSUED and nothing left in the queue."""
        if await self.issued() < len(self.history.published):
            return False
        depths = await queue_depths(self.settings)
        return all(depths[name] == 0 for name in work_queues(self.settings))

    def log_offsets(self) -> dict[str, int]:
        return {proc.name: proc.log_path.stat().st_size for proc in self.all_processes}

    def noticed(self, since: dict[str, int], events: tuple[str, ...]) -> list[str]:
        """The processes that logged one of ``events`` after the offsets ``since``."""
        return [proc.name for proc in self.all_processes
                if any(logged(proc, name, since=since[proc.name]) for name in events)]

    # -- the end -------------------------------------------------------------------------------

    async def finish(self) -> dict[str, int]:
        """Stop the poller (after a last drain) and the processes (SIGTERM); their exit codes."""
        self._poller_stop.set()
        if self._poller_task is not None:
            await self._poller_task
        await self.poller.drain()
        self.history.feed = list(self.poller.seen)
        self.history.ledger = self.mock.ledger()
        self.history.dead_letters = await read_dead_letters(self.settings)  # must be none

        def terminate_all() -> dict[str, int]:
            return {proc.name: proc.terminate(timeout=40) for proc in self.all_processes}

        return await asyncio.to_thread(terminate_all)

    async def close(self) -> None:
        self._poller_stop.set()
        if self._poller_task is not None:
            self._poller_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller_task
        with contextlib.suppress(Exception):
            await self.publisher.close()
        await self.poller.close()
        await self.engine.dispose()
        self.processes.close()


def logged(proc: GaplessProcess | None, event: str, *, since: int = 0) -> bool:
    """Whether ``proc`` logged a JSON record with this ``event`` after byte ``since``."""
    if proc is None:
        return False
    chunk = text_after(proc.log_path, since)
    needle = f'"event": "{event}"'
    return any(needle in line for line in chunk.splitlines() if line.startswith("{"))


def count_events(proc: GaplessProcess, names: tuple[str, ...]) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in proc.output().splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                event = json.loads(line).get("event")
                if event in names:
                    found[event] += 1
    return found
