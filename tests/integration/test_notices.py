"""The listener behind the worker's memory of recipient answers: every payload of its channel is
passed on; deafness is told before anything could be missed (the connection cut, the database
out of reach), and it listens again by itself."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from gapless.ledger import notices as notices_module
from gapless.ledger.conninfo import driver_conninfo
from gapless.ledger.notices import Notices
from tests.helpers import at_once, await_until


class Ear:
    def __init__(self) -> None:
        self.heard: list[str] = []
        self.events: list[str] = []

    def notice(self, payload: str) -> None:
        self.heard.append(payload)

    def listening(self) -> None:
        self.events.append("listening")

    def deaf(self) -> None:
        self.events.append("deaf")



async def sql(db_url: str, statement: str, *params: object) -> None:
    async with await psycopg.AsyncConnection.connect(driver_conninfo(db_url),
                                                     autocommit=True) as conn:
        await conn.execute(statement, params or None)


@pytest.fixture
def channel() -> str:
    return f"gapless_test_{uuid.uuid4().hex[:12]}"


async def test_payloads_are_passed_on_and_a_cut_connection_is_deaf_then_listens_again(
        db_url: str, channel: str) -> None:
    ear = Ear()
    notices = Notices(db_url, channel, on_notice=ear.notice, on_listening=ear.listening,
                      on_deaf=ear.deaf, actor="notices-test", probe_s=0.2)
    notices.start()
    try:
        assert ear.events == ["deaf"]  # deaf until the LISTEN is in place
        await await_until(at_once(lambda: notices.listening), 10, message="listening")
        await sql(db_url, "SELECT pg_notify(%s, 'a'), pg_notify(%s, 'b')", channel, channel)
        await await_until(at_once(lambda: ear.heard == ["a", "b"]), 10, message="both heard")
        await sql(db_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE application_name = 'gapless-notices-test-listen'")
        await await_until(at_once(lambda: notices.sessions == 2 and notices.listening), 20,
                          message="listening again")
        assert ear.events == ["deaf", "listening", "deaf", "listening"]
        await sql(db_url, "SELECT pg_notify(%s, 'c')", channel)
        await await_until(at_once(lambda: ear.heard == ["a", "b", "c"]), 10, message="heard again")
    finally:
        await notices.aclose()
    assert ear.events[-1] == "deaf"
    assert not notices.listening


async def test_a_stream_across_many_probes_is_heard_whole_and_in_order(
        db_url: str, channel: str) -> None:
    """Notifications keep coming while the listener probes its connection (every 0.05 s here):
    each is passed on once, in the order sent — those that arrive with a probe's answer too —
    and the session is never taken for lost."""
    ear = Ear()
    notices = Notices(db_url, channel, on_notice=ear.notice, on_listening=ear.listening,
                      on_deaf=ear.deaf, actor="notices-test", probe_s=0.05)
    notices.start()
    try:
        await await_until(at_once(lambda: notices.listening), 10, message="listening")
        sent = [str(n) for n in range(300)]
        async with await psycopg.AsyncConnection.connect(driver_conninfo(db_url),
                                                         autocommit=True) as conn:
            for payload in sent:
                await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))
        await await_until(at_once(lambda: len(ear.heard) >= len(sent)), 20, message="all heard")
        assert ear.heard == sent
        assert notices.sessions == 1
        assert ear.events == ["deaf", "listening"]
    finally:
        await notices.aclose()


async def test_a_notification_that_comes_with_the_probes_answer_is_passed_on_at_once(
        db_url: str, channel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver keeps a notification read along with a statement's answer; the listener
    takes those after every probe rather than when the server next sends something. (The probe
    is made to notify its own channel: its notification always comes with its answer.)"""
    monkeypatch.setattr(notices_module, "_STILL_LISTENING", (
        "WITH ch(name) AS (SELECT %s::text) "
        "SELECT EXISTS (SELECT 1 FROM pg_listening_channels() AS c WHERE c = ch.name) "
        "FROM ch, LATERAL pg_notify(ch.name, 'probed')"))
    ear = Ear()
    notices = Notices(db_url, channel, on_notice=ear.notice, on_listening=ear.listening,
                      on_deaf=ear.deaf, actor="notices-test", probe_s=0.1)
    notices.start()
    try:
        await await_until(at_once(lambda: ear.heard.count("probed") >= 3), 10,
                          message="every probe's notification heard")
        assert set(ear.heard) == {"probed"}
        assert notices.sessions == 1
    finally:
        await notices.aclose()


async def test_a_database_out_of_reach_leaves_it_deaf_and_trying(channel: str) -> None:
    ear = Ear()
    notices = Notices("postgresql://postgres@127.0.0.1:1/gapless", channel,
                      on_notice=ear.notice, on_listening=ear.listening, on_deaf=ear.deaf,
                      actor="notices-test")
    notices.start()
    await await_until(at_once(lambda: ear.events.count("deaf") >= 2), 10,
                      message="a failed attempt told")
    assert "listening" not in ear.events
    assert not notices.listening
    await notices.aclose()
