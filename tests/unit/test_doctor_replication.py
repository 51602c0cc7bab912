"""``gapless doctor``'s replication line from what PostgreSQL says: ok only when every commit
waits for a connected synchronous standby (named); WARN when a commit is acknowledged before any
standby has it; FAIL when commits cannot complete or the server is a standby."""

from __future__ import annotations

import pytest

from gapless.cli.doctor import check_line
from gapless.ops.doctor import (
    FAIL,
    OK,
    SKIP,
    WARN,
    DatabaseFacts,
    ReplicationFacts,
    Standby,
    check_replication,
    classify_replication,
    required_standbys,
)

SYNC = Standby("standby", "streaming", "sync")
ASYNC = Standby("standby", "streaming", "async")


def facts(*standbys: Standby, names: str = "FIRST 1 (standby)", level: str = "on",
          in_recovery: bool = False) -> ReplicationFacts:
    return ReplicationFacts(in_recovery, level, names, "gapless", tuple(standbys))


@pytest.mark.parametrize(("names", "wanted"), [
    ("", (0, False)), ("  ", (0, False)), ("standby", (1, False)), ("a, b", (1, False)),
    ("*", (1, False)), ("FIRST 2 (a, b, c)", (2, False)), ("first 1 (a)", (1, False)),
    ("2 (a, b)", (2, False)), ("ANY 2 (a, b, c)", (2, True)), ('any 1 ("x y", b)', (1, True)),
])
def test_how_many_standbys_a_commit_waits_for(names: str, wanted: tuple[int, bool]) -> None:
    assert required_standbys(names) == wanted


@pytest.mark.parametrize("level", ["on", "remote_apply", "remote_write"])
def test_a_connected_synchronous_standby_is_ok_and_named(level: str) -> None:
    check = classify_replication(facts(SYNC, level=level))
    assert (check.status, check.hint) == (OK, None)
    assert check.detail == f"commits wait for standby 'standby'; synchronous_commit = {level}"
    assert check_line(check) == (f"ok    replication commits wait for standby 'standby'; "
                                 f"synchronous_commit = {level}")


def test_other_standbys_are_named_beside_the_synchronous_ones() -> None:
    check = classify_replication(facts(
        Standby("a", "streaming", "sync"), Standby("b", "streaming", "potential"),
        Standby("c", "catchup", "async"), names="FIRST 1 (a, b)"))
    assert check.status == OK
    assert check.detail == ("commits wait for standby 'a'; synchronous_commit = on; also "
                            "connected: 'b' (potential), 'c' (async)")


def test_a_quorum_says_how_many_of_which() -> None:
    check = classify_replication(facts(Standby("a", "streaming", "quorum"),
                                       Standby("b", "streaming", "quorum"),
                                       names="ANY 1 (a, b)"))
    assert (check.status, check.detail) == (
        OK, "commits wait for 1 of 'a', 'b' (quorum); synchronous_commit = on")


def test_an_asynchronous_standby_warns_that_a_failover_can_hand_out_a_number_twice() -> None:
    check = classify_replication(facts(ASYNC, names=""))
    assert check.status == WARN
    assert check.detail == ("commits are acknowledged before a standby has them "
                            "(synchronous_standby_names is empty; 'standby' asynchronous): a "
                            "failover could hand out a sealed number twice")
    assert check.hint is not None
    assert "synchronous_standby_names" in check.hint
    assert check_line(check).startswith("WARN  replication commits are acknowledged before")


@pytest.mark.parametrize("level", ["local", "off"])
def test_a_commit_level_that_does_not_wait_warns_even_with_a_synchronous_standby(
        level: str) -> None:
    check = classify_replication(facts(SYNC, level=level))
    assert check.status == WARN
    assert f"(synchronous_commit = {level}; 'standby' asynchronous)" in check.detail


def test_no_standby_at_all_warns_and_says_what_is_at_stake() -> None:
    check = classify_replication(facts(names=""))
    assert check.status == WARN
    assert check.detail.startswith("no standby: commits are acknowledged by this server alone")
    assert "a restore could hand them out again" in check.detail


@pytest.mark.parametrize("standbys", [(), (ASYNC,), (Standby("standby", "catchup", "sync"),)])
def test_a_synchronous_standby_asked_for_and_missing_fails_every_commit_would_wait(
        standbys: tuple[Standby, ...]) -> None:
    check = classify_replication(facts(*standbys))
    assert check.status == FAIL
    assert check.detail == ("synchronous_standby_names = 'FIRST 1 (standby)' asks for 1 "
                            "synchronous standby(s), 0 connected: every commit waits until one "
                            "is")
    assert check.hint is not None
    assert check.hint.startswith("start the standby")


def test_too_few_of_a_quorum_fails() -> None:
    check = classify_replication(facts(Standby("a", "streaming", "quorum"),
                                       names="ANY 2 (a, b, c)"))
    assert check.status == FAIL
    assert "asks for 2 synchronous standby(s), 1 connected ('a')" in check.detail


def test_a_standby_server_fails() -> None:
    check = classify_replication(facts(in_recovery=True))
    assert check.status == FAIL
    assert check.detail == "this server is a standby in recovery: it takes no writes"
    assert check.hint is not None
    assert "target_session_attrs=read-write" in check.hint


def test_a_role_that_cannot_see_the_standbys_state_is_told_which_grant_helps() -> None:
    check = classify_replication(facts(Standby(None, None, None)))
    assert check.status == WARN
    assert check.detail == ("1 standby(s) connected, but role 'gapless' cannot see whether "
                            "they are synchronous")
    assert check.hint == "GRANT pg_read_all_stats TO gapless (or run doctor as a superuser)"


def test_without_the_database_the_line_is_skipped_and_an_unreadable_state_warns() -> None:
    assert check_replication(None).status == SKIP
    unread = check_replication(DatabaseFacts("0009", 0, None, "InsufficientPrivilege: no"))
    assert (unread.status, unread.detail) == (
        WARN, "cannot read the replication state: InsufficientPrivilege: no")
