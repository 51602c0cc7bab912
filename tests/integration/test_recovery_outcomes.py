"""Group commit of ISSUED outcomes (``gapless.issuing.issued.IssuedWriter``) against PostgreSQL:
concurrent outcomes share transactions, each caller learns its own result after the commit (its
document stored with it), and a batch that fails is retried one invoice at a time so one bad row
cannot fail its neighbours."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Status
from gapless.integrator.base import Document, Receipt
from gapless.issuing.issued import IssuedWriter
from gapless.ledger.invoices import Sending, mark_issued, mark_issued_many
from tests.helpers import json_document, ledger
from tests.recovery_support import define_series, invoice_rows, make_sending


def receipt(sending: Sending) -> Receipt:
    return Receipt(sending.tenant, sending.number, sending.invoice_id, f"ref-{sending.reserved_no}")


def document(sending: Sending) -> Document:
    return json_document(sending.tenant, sending.number, sending.invoice_id, sending.payload,
                         document_uuid=sending.uuid)


async def test_concurrent_outcomes_share_transactions_and_each_learns_its_own(
        engine: AsyncEngine) -> None:
    await define_series(engine)
    orphans = await make_sending(engine, [f"inv-{i:02d}" for i in range(40)])
    settled_before = orphans[0]
    await mark_issued(ledger(engine), settled_before.pk, receipt(settled_before))
    writer = IssuedWriter(ledger(engine))

    results = await asyncio.gather(*(writer.issued(s, receipt(s), document(s))
                                     for s in orphans))
    await writer.aclose()

    assert results == [False] + [True] * 39  # the one settled before was not touched again
    rows = await invoice_rows(engine)
    for sending in orphans:
        row = rows[sending.invoice_id]
        assert (row.status, row.integrator_ref) == (Status.ISSUED, f"ref-{sending.reserved_no}")
    async with engine.connect() as conn:
        stored = dict((await conn.execute(text(
            "SELECT i.invoice_id, d.sha256 FROM invoices i "
            "JOIN invoice_documents d ON d.invoice_pk = i.id AND d.sha256 = i.document_sha256"
        ))).all())
    assert stored == {s.invoice_id: document(s).sha256 for s in orphans[1:]}
    async with engine.connect() as conn:
        transactions = (await conn.execute(text(
            "SELECT count(DISTINCT created_at) FROM invoice_events WHERE kind = 'issued' "
            "AND invoice_id <> :first"), {"first": settled_before.invoice_id})).scalar_one()
    assert transactions < 39  # grouped: fewer commits than outcomes


async def test_a_failing_batch_is_retried_one_by_one(engine: AsyncEngine) -> None:
    await define_series(engine)
    orphans = await make_sending(engine, ["good-1", "bad", "good-2"])
    async with engine.begin() as conn:  # a row that cannot be updated, whatever the statement
        await conn.execute(text("""
            CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.invoice_id = 'bad' AND NEW.status = 'ISSUED' THEN
                    RAISE EXCEPTION 'refused';
                END IF;
                RETURN NEW;
            END $$"""))
        await conn.execute(text("CREATE TRIGGER refuse_bad BEFORE UPDATE ON invoices "
                                "FOR EACH ROW EXECUTE FUNCTION refuse_bad()"))
    writer = IssuedWriter(ledger(engine))

    results = await asyncio.gather(*(writer.issued(s, receipt(s), document(s))
                                     for s in orphans), return_exceptions=True)

    assert results[0] is True
    assert results[2] is True
    assert isinstance(results[1], Exception)
    assert "refused" in str(results[1])
    rows = await invoice_rows(engine)
    assert [rows[i].status for i in ("good-1", "bad", "good-2")] == [
        Status.ISSUED, Status.SENDING, Status.ISSUED]


async def test_a_lone_outcome_is_written_at_once(engine: AsyncEngine) -> None:
    await define_series(engine)
    [sending] = await make_sending(engine, ["alone"])
    writer = IssuedWriter(ledger(engine))
    assert await asyncio.wait_for(writer.issued(sending, receipt(sending), document(sending)),
                                  10) is True
    assert (await invoice_rows(engine))["alone"].status == Status.ISSUED


async def test_writers_settling_two_series_in_opposite_orders_never_deadlock(
        engines: Callable[..., AsyncEngine]) -> None:
    """Each ISSUED record extends its counter's chain, and the chain's head is the counter's
    row. Two writers whose batches reach the series in opposite orders (by id: one holds A's
    invoices before B's, the other B's before A's) took the heads in opposite orders and
    deadlocked; the counters are now locked in one order before the rows are settled."""
    engine = engines("setup")
    await define_series(engine, code="ABC")
    await define_series(engine, code="XYZ")
    first = [*await make_sending(engine, [f"a1-{i:02d}" for i in range(30)], series="ABC"),
             *await make_sending(engine, [f"b1-{i:02d}" for i in range(30)], series="XYZ")]
    second = [*await make_sending(engine, [f"b2-{i:02d}" for i in range(30)], series="XYZ"),
              *await make_sending(engine, [f"a2-{i:02d}" for i in range(30)], series="ABC")]

    async def settle(batch: list[Sending], actor: str) -> set[int]:
        return await mark_issued_many(
            ledger(engines(actor, pool_size=1)),
            {s.pk: (receipt(s).ref, document(s)) for s in batch})

    settled = await asyncio.gather(settle(first, "writer-1"), settle(second, "writer-2"))

    assert settled == [{s.pk for s in first}, {s.pk for s in second}]
    async with engine.connect() as conn:
        records = dict((await conn.execute(text(
            "SELECT series, count(*) FROM chain_records WHERE kind = 'issued' "
            "GROUP BY series"))).all())
    assert records == {"ABC": 60, "XYZ": 60}


async def test_a_batch_stores_each_new_document_byte_for_byte_and_leaves_stored_ones(
        engine: AsyncEngine) -> None:
    """The batch's arrays travel in binary: bytes of every value (NUL, quotes, backslashes,
    braces, non-ASCII) arrive as they were sent; a document already stored (sha256 NULL in
    the batch) is neither stored again nor unlinked; a batch of one takes the one-row path."""
    await define_series(engine)
    sendings = await make_sending(engine, [f"bytes-{i}" for i in range(4)])
    bodies = [b'{"a":"\\"{},\\u0000"}', bytes(range(256)), "şğüİ \"'{}".encode(), b"\\x00"]
    documents = [Document.of(tenant=s.tenant, number=s.number, invoice_id=s.invoice_id,
                             uuid=str(s.uuid), body=body, media_type="application/xml",
                             format="ubl-tr-test/1")
                 for s, body in zip(sendings, bodies, strict=True)]
    kept = documents[1]
    async with engine.begin() as conn:  # the second one's bytes were stored by an earlier send
        await conn.execute(text(
            "INSERT INTO invoice_documents (invoice_pk, sha256, media_type, format, body) "
            "VALUES (:pk, :sha256, :media_type, :format, :body)"),
            {"pk": sendings[1].pk, "sha256": kept.sha256, "media_type": kept.media_type,
             "format": kept.format, "body": kept.body})
        await conn.execute(text("UPDATE invoices SET document_sha256 = :sha256 WHERE id = :pk"),
                           {"pk": sendings[1].pk, "sha256": kept.sha256})
    documents[1] = Document.of(tenant=kept.tenant, number=kept.number,
                               invoice_id=kept.invoice_id, uuid=kept.uuid, body=kept.body,
                               media_type=kept.media_type, format=kept.format, stored=True)

    many = await mark_issued_many(ledger(engine), {
        s.pk: (f"ref-{s.reserved_no}", d) for s, d in zip(sendings[:3], documents[:3],
                                                            strict=True)})
    one = await mark_issued_many(ledger(engine), {sendings[3].pk: ("ref-one", documents[3])})
    again = await mark_issued_many(ledger(engine), {sendings[3].pk: ("ref-two", documents[3])})

    assert (many, one, again) == ({s.pk for s in sendings[:3]}, {sendings[3].pk}, set())
    async with engine.connect() as conn:
        stored = (await conn.execute(text(
            "SELECT i.invoice_id, count(d.*), (array_agg(d.body))[1],"
            "       bool_and(d.sha256 = i.document_sha256)"
            "  FROM invoices i LEFT JOIN invoice_documents d ON d.invoice_pk = i.id"
            " GROUP BY i.invoice_id ORDER BY i.invoice_id"))).all()
    assert [(row[1], bytes(row[2]), row[3]) for row in stored] == [(1, body, True)
                                                                    for body in bodies]
    rows = await invoice_rows(engine)
    assert rows["bytes-3"].integrator_ref == "ref-one"
