"""``gapless dead list | replay`` on a real RabbitMQ: nothing is lost, fixes reach the queue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gapless.amqp.management import queue_depths
from gapless.amqp.publisher import Publisher
from gapless.constants import HEADER_DEAD_REASON, HEADER_REPLAYED_AT, PRIORITY_USER
from gapless.settings import Settings
from tests.helpers import GaplessProcess, await_until, run_gapless, today
from tests.worker_support import take_queue

VALID = {"tenant": "acme", "series": "ABC", "issue_date": today(), "currency": "TRY",
         "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
         "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                    "vat_rate": "20"}]}


def broken(invoice_id: str) -> bytes:
    """A body that names its invoice but breaks the contract (no lines)."""
    body = {key: value for key, value in VALID.items() if key != "lines"}
    return json.dumps({**body, "invoice_id": invoice_id}).encode()


@pytest.fixture
async def dead_letters(settings: Settings) -> Settings:
    """Three dead letters: two readable broken invoices (one user priority) and one non-JSON."""
    async with Publisher(settings) as publisher:
        await publisher.dead_letter(broken("inv-1"), reason="lines: field required",
                                    content_type="application/json", message_id="inv-1",
                                    priority=PRIORITY_USER, worker="host:1")
        await publisher.dead_letter(b"\x00garbage", reason="body is not UTF-8 JSON")
        await publisher.dead_letter(broken("inv-3"), reason="lines: field required",
                                    content_type="application/json", message_id="inv-3")
    return settings


async def depths(settings: Settings) -> tuple[int, int]:
    found = await queue_depths(settings)
    return found[settings.queue], found[f"{settings.queue}.dead"]


def dead_list(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = run_gapless(["dead", "list", "--json", *args], env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


async def test_list_shows_reasons_and_keeps_every_message(
        dead_letters: Settings, gapless_env: dict[str, str]) -> None:
    first = dead_list(gapless_env)
    assert first["total"] == 3
    assert [(m["invoice_id"], m["reason"]) for m in first["messages"]] == [
        ("inv-1", "lines: field required"), (None, "body is not UTF-8 JSON"),
        ("inv-3", "lines: field required")]
    assert first["messages"][0]["worker"] == "host:1"
    assert first["messages"][0]["priority"] == PRIORITY_USER
    assert all(m["dead_at"] for m in first["messages"])
    # Listing is not consuming: the same messages, in the same order, are still there.
    assert dead_list(gapless_env) == first
    assert await depths(dead_letters) == (0, 3)

    limited = dead_list(gapless_env, "--limit", "1")
    assert (limited["total"], len(limited["messages"])) == (3, 1)
    table = run_gapless(["dead", "list"], {**gapless_env, "COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    assert "showing 3 of 3" in table.stdout
    assert "(unreadable body)" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    assert await depths(dead_letters) == (0, 3)


async def test_replay_with_a_fixed_body_moves_exactly_that_message(
        dead_letters: Settings, gapless_env: dict[str, str], tmp_path: Path) -> None:
    fixed = {**VALID, "invoice_id": "inv-1"}
    fixes = tmp_path / "fixes.jsonl"
    fixes.write_text(json.dumps(fixed) + "\n", encoding="utf-8")

    result = run_gapless(["dead", "replay", "--file", str(fixes)], gapless_env)
    assert result.returncode == 0, result.stderr
    assert "replayed inv-1 (fixed body)" in result.stdout
    assert await depths(dead_letters) == (1, 2)
    assert [m["invoice_id"] for m in dead_list(gapless_env)["messages"]] == [None, "inv-3"]

    [message] = await take_queue(dead_letters)
    assert json.loads(message.body) == fixed
    assert message.priority == PRIORITY_USER  # the dead copy's priority is kept
    assert message.message_id == "inv-1"
    assert HEADER_REPLAYED_AT in message.headers
    assert HEADER_DEAD_REASON not in message.headers


async def test_replay_by_invoice_id_and_all(dead_letters: Settings,
                                            gapless_env: dict[str, str]) -> None:
    missing = run_gapless(["dead", "replay", "--invoice-id", "nope"], gapless_env)
    assert missing.returncode == 1
    assert "not in" in missing.stderr
    assert await depths(dead_letters) == (0, 3)

    one = run_gapless(["dead", "replay", "--invoice-id", "inv-3"], gapless_env)
    assert one.returncode == 0, one.stderr
    assert await depths(dead_letters) == (1, 2)
    [message] = await take_queue(dead_letters)
    assert message.body == broken("inv-3")  # no fix given: the original body

    everything = run_gapless(["dead", "replay", "--all"], gapless_env)
    assert everything.returncode == 0, everything.stderr
    assert await depths(dead_letters) == (2, 0)


async def test_an_invalid_fix_is_refused_before_anything_moves(
        dead_letters: Settings, gapless_env: dict[str, str], tmp_path: Path) -> None:
    fixes = tmp_path / "fixes.jsonl"
    fixes.write_text(json.dumps({"invoice_id": "inv-1", "tenant": "acme"}) + "\n",
                     encoding="utf-8")
    result = run_gapless(["dead", "replay", "--file", str(fixes)], gapless_env)
    assert result.returncode == 2
    assert "--file line 1" in result.stderr
    assert await depths(dead_letters) == (0, 3)
    usage = run_gapless(["dead", "replay"], gapless_env)
    assert usage.returncode == 2
    both = run_gapless(["dead", "replay", "--all", "--invoice-id", "inv-1"], gapless_env)
    assert both.returncode == 2


async def test_a_replayed_message_that_is_still_invalid_returns_to_dead_with_its_reason(
        dead_letters: Settings, integrated_env: dict[str, str], log_dir: Path) -> None:
    worker = GaplessProcess(["worker", "--concurrency", "2"], integrated_env, log_dir, "worker")
    try:
        result = run_gapless(["dead", "replay", "--invoice-id", "inv-3"], integrated_env)
        assert result.returncode == 0, result.stderr

        async def back_in_dead() -> bool:
            return await depths(dead_letters) == (0, 3)

        # The worker takes it from the main queue and dead-letters it again, reason and all.
        await await_until(back_in_dead, 60, message="the replayed message to be dead again")
        messages = dead_list(integrated_env)["messages"]
        again = [m for m in messages if m["invoice_id"] == "inv-3"]
        assert len(again) == 1
        assert again[0]["reason"]
        assert again[0]["worker"]  # dead-lettered by the worker this time
    finally:
        worker.terminate()
        worker.close()


async def test_two_tenants_dead_messages_of_one_id_are_each_their_own(
        settings: Settings, gapless_env: dict[str, str], tmp_path: Path) -> None:
    """Invoice ids are unique per tenant: a fix replaces its own tenant's dead message only,
    and --tenant picks one tenant's message of an id two tenants have."""
    def broken_of(tenant: str) -> bytes:
        body = {key: value for key, value in VALID.items() if key != "lines"}
        return json.dumps({**body, "tenant": tenant, "invoice_id": "inv-1"}).encode()

    async with Publisher(settings) as publisher:
        for tenant in ("acme", "globex"):
            await publisher.dead_letter(broken_of(tenant), reason="lines: field required",
                                        content_type="application/json")
    fixed = {**VALID, "tenant": "globex", "invoice_id": "inv-1"}
    fixes = tmp_path / "fixes.jsonl"
    fixes.write_text(json.dumps(fixed) + "\n", encoding="utf-8")

    result = run_gapless(["dead", "replay", "--file", str(fixes)], gapless_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("replayed inv-1 (fixed body)") == 1
    assert await depths(settings) == (1, 1)
    [message] = await take_queue(settings)
    assert json.loads(message.body) == fixed  # globex's fix went out with globex's message
    [left] = dead_list(gapless_env)["messages"]
    assert left["invoice_id"] == "inv-1"

    other = run_gapless(["dead", "replay", "--invoice-id", "inv-1", "--tenant", "globex"],
                        gapless_env)
    assert other.returncode == 1, other.stderr  # globex has none left: nothing moves
    assert "not in" in other.stderr
    assert await depths(settings) == (0, 1)
    mine = run_gapless(["dead", "replay", "--invoice-id", "inv-1", "--tenant", "acme"],
                       gapless_env)
    assert mine.returncode == 0, mine.stderr
    [message] = await take_queue(settings)
    assert message.body == broken_of("acme")
