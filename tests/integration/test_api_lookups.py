"""The API's reads of what the database holds of single POSTs' invoices, against the real
database: the questions asked together share one statement, those asked while it runs share the
next, each caller gets its own key's answer, a lone question is read at once, and a read that
fails fails only the questions it held."""

from __future__ import annotations

import asyncio
from typing import cast

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.api.lookups import KnownLookups
from gapless.constants import Status
from gapless.ledger.database import Database
from gapless.ledger.invoices import KnownInvoice
from gapless.ledger.queries import invoices as iq
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from tests.helpers import CALLERS, GatedDatabase, await_until, ledger, together


@pytest.fixture
def known(gated: GatedDatabase) -> KnownLookups:
    return KnownLookups(cast(Database, gated))


@pytest.fixture
async def drafts(engine: AsyncEngine) -> dict[tuple[str, str], KnownInvoice]:
    """Invoices of two tenants and two series, one of them cancelled: what the reads find."""
    db = ledger(engine)
    for tenant, code in (("acme", "ABC"), ("acme", "XYZ"), ("beta", "ABC")):
        await add_series(db, build_series_spec(tenant, code))
    held = {("acme", "INV-1"): ("ABC", "RECEIVED"), ("acme", "INV-2"): ("XYZ", "CANCELLED"),
            ("beta", "INV-1"): ("ABC", "RECEIVED")}
    for (tenant, invoice_id), (series, status) in held.items():
        await db.execute("INSERT INTO invoices (invoice_id, tenant, series, status, payload) "
                         "VALUES (%(id)s, %(tenant)s, %(series)s, %(status)s, '{}')",
                         {"id": invoice_id, "tenant": tenant, "series": series,
                          "status": status})
    return {key: KnownInvoice(series, Status(status))
            for key, (series, status) in held.items()}


def key_of(n: int) -> tuple[str, str]:
    """The n-th caller's key: the held ones in turn, and keys nobody holds."""
    return [("acme", "INV-1"), ("acme", "INV-2"), ("beta", "INV-1"), ("beta", "INV-2"),
            ("acme", f"NEW-{n}")][n % 5]


async def test_questions_asked_together_share_one_read_and_get_their_own_answers(
        gated: GatedDatabase, known: KnownLookups,
        drafts: dict[tuple[str, str], KnownInvoice]) -> None:
    asked = iter(range(CALLERS))
    keys: list[tuple[str, str]] = []

    async def ask() -> KnownInvoice | None:
        key = key_of(next(asked))
        keys.append(key)
        return await known.known(*key)

    async def first_read_started() -> bool:
        return gated.reads[iq.KNOWN_INVOICES] == 1

    gated.gate.clear()
    first = asyncio.create_task(known.known("acme", "INV-1"))  # the read in flight, held
    await await_until(first_read_started, timeout=10, message="the first read started")
    tasks = await together(gated, ask)
    assert gated.reads[iq.KNOWN_INVOICES] == 1  # the others wait for the next read
    gated.gate.set()
    answers = await asyncio.gather(*tasks)
    assert await first == drafts[("acme", "INV-1")]
    assert gated.reads[iq.KNOWN_INVOICES] == 2  # one more for all forty
    assert answers == [drafts.get(key) for key in keys]
    assert {answer is None for answer in answers} == {True, False}


async def test_a_lone_question_is_read_at_once(gated: GatedDatabase, known: KnownLookups,
                                               drafts: dict[tuple[str, str], KnownInvoice]
                                               ) -> None:
    assert await known.known("beta", "INV-1") == drafts[("beta", "INV-1")]
    assert await known.known("beta", "INV-9") is None
    assert gated.reads[iq.KNOWN_INVOICES] == 2


async def test_a_failed_read_fails_its_questions_only(gated: GatedDatabase, known: KnownLookups,
                                                      drafts: dict[tuple[str, str], KnownInvoice]
                                                      ) -> None:
    gated.fail_next = True
    tasks = await together(gated, lambda: known.known("acme", "INV-1"))
    gated.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(result, psycopg.OperationalError) for result in results)
    assert gated.reads[iq.KNOWN_INVOICES] == 1
    assert await known.known("acme", "INV-1") == drafts[("acme", "INV-1")]  # read anew
    assert gated.reads[iq.KNOWN_INVOICES] == 2


async def test_a_caller_gone_leaves_the_answer_to_the_others(
        gated: GatedDatabase, known: KnownLookups,
        drafts: dict[tuple[str, str], KnownInvoice]) -> None:
    tasks = await together(gated, lambda: known.known("acme", "INV-2"))
    tasks[0].cancel()
    gated.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1:] == [drafts[("acme", "INV-2")]] * (CALLERS - 1)
    assert gated.reads[iq.KNOWN_INVOICES] == 1


async def test_a_stopped_reader_leaves_no_question_waiting(gated: GatedDatabase,
                                                           known: KnownLookups,
                                                           drafts: dict[tuple[str, str],
                                                                        KnownInvoice]) -> None:
    tasks = await together(gated, lambda: known.known("acme", "INV-1"))
    reader = known._grouped._runner
    assert reader is not None
    reader.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(result, asyncio.CancelledError) for result in results)
    await known.aclose()
    gated.gate.set()
    assert await known.known("acme", "INV-1") == drafts[("acme", "INV-1")]
