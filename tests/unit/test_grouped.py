"""``gapless.ledger.grouped.Grouped``, the one-statement-at-a-time grouping behind the ISSUED
outcomes' group commit and the API's existence checks, on its own: who goes into which
statement, who gets which answer, what a failure or a cancellation does to the others. (Its two
uses run against PostgreSQL in tests/integration/test_recovery_outcomes.py and
test_api_lookups.py.)"""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from gapless.ledger.grouped import Gathering, Grouped
from tests.helpers import at_once, await_until, loop_turns


class Statements:
    """A ``many`` (and a ``one``) that record every statement and answer ``item * 10``; a
    statement waits at ``gate`` when one is set, and an item in ``bad`` fails its statement."""

    def __init__(self, *, gated: bool = False, bad: frozenset[int] = frozenset()) -> None:
        self.many_calls: list[list[int]] = []
        self.one_calls: list[int] = []
        self.gate: asyncio.Event | None = asyncio.Event() if gated else None
        self.bad = bad

    async def many(self, items: list[int]) -> list[int]:
        self.many_calls.append(list(items))
        if self.gate is not None:
            await self.gate.wait()
        if self.bad & set(items):
            raise ValueError(f"bad item among {items}")
        return [item * 10 for item in items]

    async def one(self, item: int) -> int:
        self.one_calls.append(item)
        if item in self.bad:
            raise ValueError(f"bad item {item}")
        return item * 10


async def first_statement(statements: Statements) -> None:
    """Wait until the first statement has started."""
    await await_until(at_once(lambda: statements.many_calls), 5, message="the first statement")


async def test_a_lone_call_goes_at_once_in_a_statement_of_its_own() -> None:
    statements = Statements()
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10)
    assert await grouped(7) == 70
    assert statements.many_calls == [[7]]


async def test_the_calls_made_while_a_statement_runs_share_the_next_each_with_its_answer(
        ) -> None:
    statements = Statements(gated=True)
    assert statements.gate is not None
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=100)
    first = asyncio.create_task(grouped(1))
    await first_statement(statements)
    rest = [asyncio.create_task(grouped(item)) for item in range(2, 42)]
    await asyncio.sleep(0)
    statements.gate.set()
    assert await first == 10
    assert await asyncio.gather(*rest) == [item * 10 for item in range(2, 42)]
    assert statements.many_calls == [[1], list(range(2, 42))]


async def test_a_lingering_group_waits_for_enough_calls_and_starts_when_they_are_there(
        ) -> None:
    statements = Statements()
    # A linger far longer than the test: only the third call can start the statement.
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10, linger_s=60, enough=3)
    first, second = asyncio.create_task(grouped(1)), asyncio.create_task(grouped(2))
    await loop_turns()
    assert statements.many_calls == []
    assert not first.done()
    assert await asyncio.wait_for(grouped(3), 5) == 30
    assert (await first, await second) == (10, 20)
    assert statements.many_calls == [[1, 2, 3]]


async def test_a_lone_call_lingers_no_longer_than_the_linger() -> None:
    statements = Statements()
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10, linger_s=0.05,
                                         enough=4)
    assert await asyncio.wait_for(grouped(7), 5) == 70
    assert statements.many_calls == [[7]]


async def test_a_group_already_big_enough_does_not_linger() -> None:
    statements = Statements(gated=True)
    assert statements.gate is not None
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10, linger_s=60, enough=2)
    calls = [asyncio.create_task(grouped(item)) for item in range(5)]
    await first_statement(statements)  # five waiting: no wait for company
    statements.gate.set()
    assert await asyncio.wait_for(asyncio.gather(*calls), 5) == [0, 10, 20, 30, 40]
    assert statements.many_calls == [[0, 1, 2, 3, 4]]


async def test_the_runner_cancelled_while_it_lingers_cancels_its_callers() -> None:
    statements = Statements()
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10, linger_s=60, enough=3)
    call = asyncio.create_task(grouped(1))
    await loop_turns()
    grouped._runner.cancel()  # type: ignore[union-attr]
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, 5)
    assert statements.many_calls == []


def test_a_gathering_refuses_a_negative_linger_or_nothing_to_wait_for() -> None:
    with pytest.raises(ValueError, match="seconds must be at least 0"):
        Gathering(-0.001, 2)
    with pytest.raises(ValueError, match="enough at least 1"):
        Gathering(0.001, 0)
    assert Gathering().seconds == 0


async def test_a_group_holds_at_most_max_batch_items_in_arrival_order() -> None:
    statements = Statements(gated=True)
    assert statements.gate is not None
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=3)
    calls = [asyncio.create_task(grouped(item)) for item in range(8)]
    await first_statement(statements)
    statements.gate.set()
    assert await asyncio.gather(*calls) == [item * 10 for item in range(8)]
    assert statements.many_calls == [[0, 1, 2], [3, 4, 5], [6, 7]]


async def test_without_one_a_failed_statement_fails_its_callers_and_the_next_call_goes_anew(
        ) -> None:
    statements = Statements(gated=True, bad=frozenset({3}))
    assert statements.gate is not None
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10)
    calls = [asyncio.create_task(grouped(item)) for item in (1, 2, 3)]
    await first_statement(statements)
    statements.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(result, ValueError) for result in results), results
    assert await grouped(4) == 40
    assert statements.many_calls == [[1, 2, 3], [4]]


async def test_with_one_a_failed_group_is_tried_item_by_item_and_only_the_bad_item_fails(
        ) -> None:
    statements = Statements(bad=frozenset({12}))
    grouped: Grouped[int, int] = Grouped(statements.many, one=statements.one, max_batch=10,
                                         event="test_group_failed")
    with capture_logs() as logs:
        results = await asyncio.gather(*(grouped(item) for item in (11, 12, 13)),
                                       return_exceptions=True)
    assert results[0] == 110
    assert isinstance(results[1], ValueError)
    assert results[2] == 130
    # The three, made before the runner started, failed together, then went singly.
    assert statements.many_calls == [[11, 12, 13]]
    assert statements.one_calls == [11, 12, 13]
    assert [(log["event"], log["size"], log["error"]) for log in logs] == [
        ("test_group_failed", 3, "ValueError")]


async def test_a_lone_item_that_fails_is_not_tried_again() -> None:
    statements = Statements(bad=frozenset({5}))
    grouped: Grouped[int, int] = Grouped(statements.many, one=statements.one, max_batch=10)
    with pytest.raises(ValueError, match="bad item"):
        await grouped(5)
    assert statements.one_calls == []


async def test_answers_that_do_not_match_the_items_fail_the_group_rather_than_hang() -> None:
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    grouped: Grouped[int, int] = Grouped(short, max_batch=10)
    calls = [asyncio.create_task(grouped(item)) for item in (1, 2)]
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert [type(result) for result in results] == [RuntimeError, RuntimeError]
    assert "1 answers for 2 items" in str(results[0])


async def test_a_caller_gone_while_waiting_leaves_the_others_their_answers() -> None:
    statements = Statements(gated=True)
    assert statements.gate is not None
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10)
    first = asyncio.create_task(grouped(1))
    await first_statement(statements)
    gone = asyncio.create_task(grouped(2))
    staying = asyncio.create_task(grouped(3))
    await asyncio.sleep(0)
    gone.cancel()
    statements.gate.set()
    assert await first == 10
    assert await staying == 30
    assert gone.cancelled()


async def test_a_runner_cancelled_leaves_no_caller_waiting() -> None:
    statements = Statements(gated=True)
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=1)
    calls = [asyncio.create_task(grouped(item)) for item in range(3)]
    await first_statement(statements)
    runner = grouped._runner
    assert runner is not None
    runner.cancel()
    results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
    assert all(isinstance(result, asyncio.CancelledError) for result in results), results
    # Nothing is left behind: the next call starts a runner of its own.
    assert statements.gate is not None
    statements.gate.set()
    assert await grouped(9) == 90


async def test_aclose_waits_for_the_statement_in_flight() -> None:
    statements = Statements(gated=True)
    assert statements.gate is not None
    grouped: Grouped[int, int] = Grouped(statements.many, max_batch=10)
    await grouped.aclose()  # nothing ran yet: returns at once
    call = asyncio.create_task(grouped(1))
    await first_statement(statements)
    closing = asyncio.create_task(grouped.aclose())
    done, _ = await asyncio.wait({closing}, timeout=0.05)
    assert not done
    statements.gate.set()
    await asyncio.wait_for(closing, 5)
    assert call.done()
    assert call.result() == 10


def test_a_group_of_less_than_one_is_refused() -> None:
    async def many(items: list[int]) -> list[int]:
        return items

    with pytest.raises(ValueError, match="max_batch"):
        Grouped(many, max_batch=0)
