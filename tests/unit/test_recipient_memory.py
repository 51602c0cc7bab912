"""The recipient answers a worker keeps in memory: kept only while it listens to the table's change
notices, never past their TTL, dropped when the table announces a change, and never kept from a
read that a change may have overtaken."""

from __future__ import annotations

import time

from gapless.integrator.base import Recipient
from gapless.issuing.routing import RecipientMemory

REGISTERED = Recipient("4840847211", True, ("urn:mail:apk@a.example",))
OTHER = Recipient("5950193314", False, ())


def listening() -> RecipientMemory:
    memory = RecipientMemory()
    memory.listening()
    return memory


def later(seconds: float = 60.0) -> float:
    return time.monotonic() + seconds


def test_an_answer_is_kept_per_account_until_its_ttl_ends() -> None:
    memory = listening()
    memory.keep("", REGISTERED, until=later(), generation=memory.generation)
    memory.keep("test", OTHER, until=time.monotonic() - 0.001, generation=memory.generation)
    assert memory.get("", REGISTERED.tax_id) == REGISTERED
    assert memory.get("test", REGISTERED.tax_id) is None  # another account's registry
    assert memory.get("test", OTHER.tax_id) is None  # past its TTL: gone


def test_nothing_is_kept_before_it_listens_nor_after_it_goes_deaf() -> None:
    memory = RecipientMemory()
    memory.keep("", REGISTERED, until=later(), generation=memory.generation)
    assert memory.get("", REGISTERED.tax_id) is None
    memory.listening()
    memory.keep("", REGISTERED, until=later(), generation=memory.generation)
    assert memory.get("", REGISTERED.tax_id) == REGISTERED
    memory.deaf()
    assert memory.get("", REGISTERED.tax_id) is None
    memory.keep("", REGISTERED, until=later(), generation=memory.generation)
    assert memory.get("", REGISTERED.tax_id) is None
    memory.listening()  # listening again starts empty
    assert memory.get("", REGISTERED.tax_id) is None


def test_a_change_announced_drops_that_answer_only() -> None:
    memory = listening()
    for account, answer in (("", REGISTERED), ("", OTHER), ("test", REGISTERED)):
        memory.keep(account, answer, until=later(), generation=memory.generation)
    memory.heard(f"\t{REGISTERED.tax_id}")
    assert memory.get("", REGISTERED.tax_id) is None
    assert memory.get("", OTHER.tax_id) == OTHER
    assert memory.get("test", REGISTERED.tax_id) == REGISTERED


def test_a_truncate_or_an_unreadable_notice_drops_every_answer() -> None:
    for payload in ("*", "no tab here"):
        memory = listening()
        memory.keep("", REGISTERED, until=later(), generation=memory.generation)
        memory.heard(payload)
        assert memory.get("", REGISTERED.tax_id) is None


def test_a_read_overtaken_by_any_notice_is_not_kept() -> None:
    """The read began, then a change was announced (of any answer: the notice may be of the one
    read): what the read returns may predate it, so it is used once and not kept."""
    for overtaken in (lambda m: m.heard(f"\t{OTHER.tax_id}"), lambda m: m.deaf(),
                      lambda m: m.forget("", REGISTERED.tax_id)):
        memory = listening()
        before = memory.generation
        overtaken(memory)
        memory.listening()
        memory.keep("", REGISTERED, until=later(), generation=before)
        assert memory.get("", REGISTERED.tax_id) is None


def test_memory_is_bounded_and_lets_the_oldest_go() -> None:
    memory = RecipientMemory(max_entries=3)
    memory.listening()
    answers = [Recipient(f"{1000000000 + n}", False, ()) for n in range(5)]
    for answer in answers:
        memory.keep("", answer, until=later(), generation=memory.generation)
    assert [memory.get("", a.tax_id) for a in answers] == [None, None, *answers[2:]]
