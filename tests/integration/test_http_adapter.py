"""``HttpIntegrator`` against the real mock integrator: every answer classified as the worker and
recovery need it, every fault produced at its configured rate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gapless.integrator.base import (
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    Integrator,
    PermanentRejection,
    Receipt,
    TransientIntegratorError,
    load_integrator,
)
from gapless.integrator.http import HttpIntegrator
from gapless.integrator.mock.state import REJECT_REASONS
from gapless.settings import Settings
from tests.helpers import await_until, free_port, json_document
from tests.mock_client import MockIntegratorClient

Outcome = Receipt | BaseException


def document(number: str, invoice_id: str, *, tenant: str = "acme",
             tax_id: str = "1234567890") -> Document:
    return json_document(tenant, number, invoice_id,
                         {"customer": {"tax_id": tax_id, "name": "Example Ltd"},
                          "currency": "TRY"})


@pytest.fixture
async def adapter(mock_integrator: MockIntegratorClient) -> AsyncIterator[HttpIntegrator]:
    integrator = HttpIntegrator(Settings(integrator_url=mock_integrator.url,
                                         integrator_timeout_s=2.0))
    yield integrator
    await integrator.aclose()


async def outcome(call: Awaitable[Receipt]) -> Outcome:
    try:
        return await call
    except Exception as exc:
        return exc


async def bounded(calls: list[Callable[[], Awaitable[Outcome]]], limit: int) -> list[Outcome]:
    """Run ``calls`` with at most ``limit`` in flight, results in call order."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[Outcome]]) -> Outcome:
        async with gate:
            return await call()

    return await asyncio.gather(*(one(call) for call in calls))


def test_the_default_adapter_is_loaded_from_settings() -> None:
    assert isinstance(load_integrator(Settings()), HttpIntegrator)
    assert isinstance(HttpIntegrator(Settings()), Integrator)


async def test_classifies_accept_duplicates_and_rejections(
        adapter: HttpIntegrator, mock_integrator: MockIntegratorClient) -> None:
    receipt = await adapter.send(document("N1", "inv-1"))
    assert (receipt.tenant, receipt.number, receipt.invoice_id) == ("acme", "N1", "inv-1")
    assert receipt.ref.startswith("MI-")

    with pytest.raises(DuplicateOfMine) as mine:
        await adapter.send(document("N1", "inv-1"))
    assert mine.value.receipt == receipt

    with pytest.raises(DuplicateOfAnother) as another:
        await adapter.send(document("N1", "inv-2"))
    assert (another.value.number, another.value.holder_invoice_id) == ("N1", "inv-1")

    with pytest.raises(PermanentRejection) as rejected:
        await adapter.send(document("N2", "inv-2", tax_id="0000000000"))
    assert rejected.value.reason == "invalid tax id"
    assert "0000000000" not in str(rejected.value)

    assert await adapter.lookup("acme", "N1") == receipt
    assert await adapter.lookup("acme", "N2") is None
    # By the document's UUID (ETTN): found under whichever number it was accepted; another
    # tenant's UUID space is separate.
    sent = document("N1", "inv-1")
    assert await adapter.lookup_uuid("acme", sent.uuid) == receipt
    assert await adapter.lookup_uuid("acme", document("N2", "inv-2").uuid) is None
    assert await adapter.lookup_uuid("globex", sent.uuid) is None
    assert [e["number"] for e in mock_integrator.ledger()] == ["N1"]


async def test_other_4xx_is_permanent_with_the_status_in_the_reason(
        mock_integrator: MockIntegratorClient) -> None:
    wrong_path = HttpIntegrator(Settings(integrator_url=mock_integrator.url + "/no-such-api"))
    try:
        with pytest.raises(PermanentRejection) as rejected:
            await wrong_path.send(document("N1", "inv-1"))
        assert "404" in rejected.value.reason
    finally:
        await wrong_path.aclose()


async def test_unreachable_integrator_is_transient() -> None:
    nobody = HttpIntegrator(Settings(integrator_url=f"http://127.0.0.1:{free_port()}"))
    try:
        with pytest.raises(TransientIntegratorError):
            await nobody.send(document("N1", "inv-1"))
        with pytest.raises(TransientIntegratorError):
            await nobody.lookup("acme", "N1")
    finally:
        await nobody.aclose()


async def test_down_is_transient_for_send_and_lookup(
        adapter: HttpIntegrator, mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(down=True)
    with pytest.raises(TransientIntegratorError):
        await adapter.send(document("N1", "inv-1"))
    with pytest.raises(TransientIntegratorError):
        await adapter.lookup("acme", "N1")
    mock_integrator.set_faults(down=False)
    assert mock_integrator.ledger() == []


async def test_50_concurrent_sends_of_one_number_one_receipt_49_duplicates_of_another(
        adapter: HttpIntegrator, mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(latency_ms=[5, 30])
    results = await asyncio.gather(*(outcome(adapter.send(document("N7", f"inv-{i}")))
                                     for i in range(50)))
    receipts = [r for r in results if isinstance(r, Receipt)]
    others = [r for r in results if isinstance(r, DuplicateOfAnother)]
    assert (len(receipts), len(others)) == (1, 49)
    assert {d.holder_invoice_id for d in others} == {receipts[0].invoice_id}


async def test_the_pool_carries_128_calls_in_flight_at_once(
        mock_integrator: MockIntegratorClient) -> None:
    adapter = HttpIntegrator(Settings(integrator_url=mock_integrator.url,
                                      integrator_timeout_s=30))
    assert Settings().integrator_max_connections == 128
    mock_integrator.set_faults(latency_ms=[20_000, 20_000])  # every call stays in flight
    tasks = [asyncio.create_task(adapter.send(document(f"P{i}", f"inv-{i}"))) for i in range(128)]
    try:
        await await_until(lambda: asyncio.sleep(0, mock_integrator.stats()["posts"] == 128), 15,
                          message="128 calls to reach the mock together")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await adapter.aclose()


def rate(count: int, out_of: int) -> float:
    assert out_of > 0
    return count / out_of


async def test_2000_calls_produce_each_fault_at_its_rate_and_classify_it(
        adapter: HttpIntegrator, mock_integrator: MockIntegratorClient) -> None:
    mock_integrator.set_faults(transient_rate=0.1, reject_rate=0.1, lost_response_rate=0.1,
                               lost_response_mode="500", latency_ms=[0, 2])
    docs = [document(f"R{i:05d}", f"inv-{i}") for i in range(2000)]
    results = await bounded([lambda d=d: outcome(adapter.send(d)) for d in docs], 32)

    stats = mock_integrator.stats()
    assert stats["posts"] == 2000
    transient_share = rate(stats["transient"], 2000)
    rejected_share = rate(stats["rejected"], 2000 - stats["transient"])
    lost_share = rate(stats["lost_response"], stats["accepted"])
    for share in (transient_share, rejected_share, lost_share):
        assert 0.07 <= share <= 0.13, (transient_share, rejected_share, lost_share)
    latency = stats["latency_ms"]
    assert latency["count"] == 2000
    assert 0 <= latency["min"] <= latency["max"] <= 2
    assert 0.8 <= latency["mean"] <= 1.2

    ledger = {e["number"]: e for e in mock_integrator.ledger()}
    receipts = {d.number: r for d, r in zip(docs, results, strict=True) if isinstance(r, Receipt)}
    rejected = [r for r in results if isinstance(r, PermanentRejection)]
    transient = [d for d, r in zip(docs, results, strict=True)
                 if isinstance(r, TransientIntegratorError)]
    assert len(receipts) + len(rejected) + len(transient) == 2000  # nothing else was raised
    assert len(receipts) == stats["accepted"] - stats["lost_response"]
    assert len(rejected) == stats["rejected"]
    assert {r.reason for r in rejected} <= set(REJECT_REASONS)
    assert len(transient) == stats["transient"] + stats["lost_response"]
    for number, receipt in receipts.items():
        assert ledger[number]["ref"] == receipt.ref
    # Transient means "outcome unknown": exactly the lost responses were accepted anyway.
    lost = [d for d in transient if d.number in ledger]
    assert len(lost) == stats["lost_response"]
    assert len(ledger) == len(receipts) + len(lost)


async def test_lost_responses_of_every_mode_are_transient_and_found_by_lookup(
        mock_integrator: MockIntegratorClient) -> None:
    # A short client timeout so the "timeout" mode costs little; the mock waits far longer.
    adapter = HttpIntegrator(Settings(integrator_url=mock_integrator.url,
                                      integrator_timeout_s=0.5))
    mock_integrator.set_faults(lost_response_rate=0.5, lost_response_mode="mixed",
                               lost_response_delay_s=60)
    try:
        docs = [document(f"L{i:04d}", f"inv-{i}") for i in range(150)]
        results = await bounded([lambda d=d: outcome(adapter.send(d)) for d in docs], 32)
        stats = mock_integrator.stats()
        modes = stats["lost_response_modes"]
        assert min(modes.values()) >= 10, modes
        assert sum(modes.values()) == stats["lost_response"]
        mock_integrator.set_faults(lost_response_rate=0.0)

        lost = [d for d, r in zip(docs, results, strict=True)
                if isinstance(r, TransientIntegratorError)]
        assert len(lost) == stats["lost_response"]
        assert all(isinstance(r, Receipt) for r in results if not isinstance(
            r, TransientIntegratorError))
        for doc in lost:
            found = await adapter.lookup(doc.tenant, doc.number)
            assert found is not None
            assert found.invoice_id == doc.invoice_id
            # The resend of a lost document is recognised as this invoice's own.
            with pytest.raises(DuplicateOfMine):
                await adapter.send(doc)
    finally:
        await adapter.aclose()


async def test_lookup_transient_faults_are_transient(
        adapter: HttpIntegrator, mock_integrator: MockIntegratorClient) -> None:
    await adapter.send(document("N1", "inv-1"))
    mock_integrator.set_faults(transient_rate=1.0)
    with pytest.raises(TransientIntegratorError):
        await adapter.lookup("acme", "N1")
