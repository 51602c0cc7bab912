"""Running the worker in-process, publishing to it, and reading what it did: shared by the
worker-flow tests (real RabbitMQ, PostgreSQL and mock integrator)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aio_pika
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.amqp.publisher import Publisher
from gapless.constants import dead_queue_name
from gapless.settings import Settings
from gapless.worker.consumer import Worker
from gapless.worker.flow import Clock
from gapless.worker.hooks import NO_HOOKS
from tests.helpers import await_until, today
from tests.mock_client import MockIntegratorClient


@asynccontextmanager
async def running_worker(settings: Settings, *, concurrency: int = 8,
                         clock: Clock | None = None) -> AsyncIterator[Worker]:
    """A :class:`worker.consumer.Worker` running on the test's event loop until the block ends
    (then stopped gracefully); ``clock`` fixes its seal moment and "today"."""
    worker = Worker(settings, concurrency=concurrency, shutdown_timeout=20, hooks=NO_HOOKS,
                    clock=clock)
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    started = asyncio.create_task(worker.started.wait())
    await asyncio.wait({task, started}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        started.cancel()
        task.result()  # re-raise why it could not start
    assert worker.started.is_set(), "worker did not start"
    try:
        yield worker
        assert not task.done(), "the worker stopped by itself"
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, timeout=60)


async def rows(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(text(
            "SELECT invoice_id, status, reserved_no, number, priority, attempts, last_error, "
            "integrator_ref, next_attempt_at, sending_since, issued_at FROM invoices "
            "ORDER BY reserved_no NULLS LAST"))
        return {row.invoice_id: row for row in result}


async def statuses(engine: AsyncEngine) -> dict[str, str]:
    return {invoice_id: row.status for invoice_id, row in (await rows(engine)).items()}


async def all_in(engine: AsyncEngine, ids: set[str], status: str) -> bool:
    current = await statuses(engine)
    return all(current.get(invoice_id) == status for invoice_id in ids)


async def counter(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        value = (await conn.execute(text(
            "SELECT coalesce(max(last_no), 0) FROM number_counters"))).scalar_one()
    return int(value)


async def publish(settings: Settings, *messages: dict[str, Any]) -> None:
    async with Publisher(settings) as publisher:
        for message in messages:
            await publisher.publish(message)


def ledger_by_number(mock: MockIntegratorClient) -> dict[str, dict[str, Any]]:
    return {entry["number"]: entry for entry in mock.ledger()}


def assert_ledger_matches_database(mock: MockIntegratorClient, current: dict[str, Any]) -> None:
    issued = {row.number: (row.invoice_id, row.integrator_ref)
              for row in current.values() if row.status == "ISSUED"}
    ledger = {entry["number"]: (entry["invoice_id"], entry["ref"]) for entry in mock.ledger()}
    assert ledger == issued


async def drain_dead(settings: Settings, expected: int) -> list[aio_pika.abc.AbstractMessage]:
    """Read (and remove) ``expected`` messages from ``<prefix>.dead``, waiting for them."""
    got: list[aio_pika.abc.AbstractMessage] = []
    connection = await aio_pika.connect(settings.amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)

        async def more() -> bool:
            while (message := await queue.get(no_ack=True, fail=False)) is not None:
                got.append(message)
            return len(got) >= expected

        await await_until(more, 60, message=f"{expected} dead-lettered messages")
    return got


async def take_queue(settings: Settings) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Take every message waiting in the test's main queue (they are acked: consumed)."""
    connection = await aio_pika.connect(settings.amqp_url)
    taken = []
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(settings.queue, passive=True)
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            taken.append(message)
    return taken


def sale(invoice_id: str, *, priority: str | None = None) -> dict[str, Any]:
    """A plain sale of tenant acme, series ABC, today (the acceptance tests' invoice)."""
    body: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": "acme", "series": "ABC",
        "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
        "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                   "vat_rate": "20"}],
    }
    if priority is not None:
        body["priority"] = priority
    return body


async def publish_many(settings: Settings, messages: list[dict[str, Any]], *,
                       parallel: int = 50) -> None:
    """Publish with confirms, ``parallel`` at a time (order within a batch is not kept)."""
    async with Publisher(settings) as publisher:
        for start in range(0, len(messages), parallel):
            await asyncio.gather(*(publisher.publish(m)
                                   for m in messages[start:start + parallel]))


# ------------------------------------------------------------ a routed tenant and its messages

#: The issuer profile of the routed tenant ``acme`` (:func:`routed_tenant`).
ROUTED_ISSUER = {"tax_id": "1234567803", "name": "Acme Bilişim A.Ş.", "tax_office": "Kadıköy",
                 "street": "Rıhtım Cad. No:1", "district": "Kadıköy", "city": "İstanbul",
                 "postal_zone": "34716"}


async def routed_tenant(engine: AsyncEngine, *, despatch: bool = False) -> None:
    """Tenant acme with the issuer profile :data:`ROUTED_ISSUER`, an e-Fatura series EFA and an
    e-Arşiv series EAR, both defaults; with ``despatch`` the default dispatch-note series IRS,
    else a series ANY without routing."""
    from gapless.documents import build_issuer
    from gapless.ledger.database import Database
    from gapless.ledger.series import add_series
    from gapless.ledger.tenants import set_profile
    from gapless.numbers import build_series_spec

    db = Database.borrowing(engine)
    async with db.transaction() as tx:
        await add_series(tx, build_series_spec("acme", "EFA", channel="efatura", default=True))
        await add_series(tx, build_series_spec("acme", "EAR", channel="earsiv", default=True))
        if despatch:
            await add_series(tx, build_series_spec("acme", "IRS", channel="edespatch",
                                                   default=True))
        else:
            await add_series(tx, build_series_spec("acme", "ANY"))
    await set_profile(db, "acme", build_issuer(**ROUTED_ISSUER))


def routed_message(invoice_id: str, tax_id: str, *, quantity: str = "2",
                   **changes: Any) -> dict[str, Any]:
    """A message of tenant acme with no series and no profile: routing chooses both."""
    data: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": "acme", "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": tax_id, "name": "Example Ltd", "tax_office": "Çankaya",
                     "address": {"district": "Çankaya", "city": "Ankara"}},
        "lines": [{"description": "Widget", "quantity": quantity, "unit_price": "10.00",
                   "vat_rate": "20"}]}
    data.update(changes)
    return data
