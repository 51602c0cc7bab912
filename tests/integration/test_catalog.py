"""The catalog's reads (series, issuer profiles, default series) against the real database: one
read per key at a time — the tasks that miss a key while it is being read wait for that read —
a failed read fails its waiters only, and a waiter cancelled leaves the read to the others."""

from __future__ import annotations

import asyncio
from typing import cast

import psycopg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.constants import Channel
from gapless.documents import build_issuer
from gapless.ledger import catalog as catalog_module
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.ledger.queries import numbering as nq
from gapless.ledger.queries import routing as rq
from gapless.ledger.queries import tenants as tq
from gapless.ledger.series import add_series
from gapless.ledger.tenants import set_profile
from gapless.numbers import build_series_spec
from tests.helpers import CALLERS, GatedDatabase, ledger, together
from tests.worker_support import ROUTED_ISSUER


@pytest.fixture
def catalog(gated: GatedDatabase) -> Catalog:
    return Catalog(cast(Database, gated))


async def read_again(gated: GatedDatabase, catalog: Catalog, code: str) -> None:
    """The next call of the series makes a read of its own (nothing was cached) and finds it."""
    reads = gated.reads[nq.GET_SERIES]
    spec = await catalog.series("acme", code)
    assert spec is not None
    assert spec.code == code
    assert gated.reads[nq.GET_SERIES] == reads + 1


async def test_the_misses_of_one_series_share_one_read(engine: AsyncEngine, gated: GatedDatabase,
                                                       catalog: Catalog) -> None:
    await add_series(ledger(engine), build_series_spec("acme", "ABC"))
    tasks = await together(gated, lambda: catalog.series("acme", "ABC"))
    assert gated.reads[nq.GET_SERIES] == 1
    gated.gate.set()
    specs = await asyncio.gather(*tasks)
    assert {spec.code if spec else None for spec in specs} == {"ABC"}
    assert all(spec is specs[0] for spec in specs)
    assert await catalog.series("acme", "ABC") is specs[0]  # cached
    assert gated.reads[nq.GET_SERIES] == 1


async def test_a_series_not_found_is_shared_then_read_again(engine: AsyncEngine,
                                                            gated: GatedDatabase,
                                                            catalog: Catalog) -> None:
    tasks = await together(gated, lambda: catalog.series("acme", "NEW"))
    gated.gate.set()
    assert await asyncio.gather(*tasks) == [None] * CALLERS
    assert gated.reads[nq.GET_SERIES] == 1
    await add_series(ledger(engine), build_series_spec("acme", "NEW"))
    await read_again(gated, catalog, "NEW")  # not found is not cached


async def test_a_failed_read_fails_its_waiters_and_the_next_miss_reads_again(
        engine: AsyncEngine, gated: GatedDatabase, catalog: Catalog) -> None:
    await add_series(ledger(engine), build_series_spec("acme", "ABC"))
    gated.fail_next = True
    tasks = await together(gated, lambda: catalog.series("acme", "ABC"))
    gated.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(outcome, psycopg.OperationalError) for outcome in outcomes)
    assert gated.reads[nq.GET_SERIES] == 1
    await read_again(gated, catalog, "ABC")


async def test_a_cancelled_waiter_leaves_the_read_to_the_others(
        engine: AsyncEngine, gated: GatedDatabase, catalog: Catalog) -> None:
    await add_series(ledger(engine), build_series_spec("acme", "ABC"))
    tasks = await together(gated, lambda: catalog.series("acme", "ABC"))
    tasks[1].cancel()  # waiters, not the caller that reads
    tasks[2].cancel()
    gated.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes[1:3])
    specs = [outcomes[0], *outcomes[3:]]
    assert {spec.code for spec in specs} == {"ABC"}  # type: ignore[union-attr]
    assert gated.reads[nq.GET_SERIES] == 1
    assert await catalog.series("acme", "ABC") is specs[0]


async def test_a_cancelled_reader_hands_the_read_to_a_waiter(
        engine: AsyncEngine, gated: GatedDatabase, catalog: Catalog) -> None:
    await add_series(ledger(engine), build_series_spec("acme", "ABC"))
    tasks = await together(gated, lambda: catalog.series("acme", "ABC"))
    assert gated.reads[nq.GET_SERIES] == 1
    tasks[0].cancel()  # the caller that reads: its read ends with it
    gated.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert {spec.code for spec in outcomes[1:]} == {"ABC"}  # type: ignore[union-attr]
    assert gated.reads[nq.GET_SERIES] == 2  # one waiter read again, for all the others
    assert all(spec is outcomes[1] for spec in outcomes[2:])


async def test_expired_defaults_are_read_once_for_every_waiter(
        engine: AsyncEngine, gated: GatedDatabase, catalog: Catalog,
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "EFA", channel="efatura", default=True))
        await add_series(tx, build_series_spec("acme", "EAR", channel="earsiv", default=True))
    assert await catalog.defaults("acme") == {Channel.EFATURA: "EFA", Channel.EARSIV: "EAR"}
    assert gated.reads[rq.DEFAULT_SERIES] == 1
    monkeypatch.setattr(catalog_module, "DEFAULTS_TTL_S", 0.0)  # every answer has expired
    tasks = await together(gated, lambda: catalog.defaults("acme"))
    gated.gate.set()
    answers = await asyncio.gather(*tasks)
    assert all(answer == {Channel.EFATURA: "EFA", Channel.EARSIV: "EAR"} for answer in answers)
    assert gated.reads[rq.DEFAULT_SERIES] == 2


async def test_profiles_are_read_once_per_key_and_a_refresh_always_reads(
        engine: AsyncEngine, gated: GatedDatabase, catalog: Catalog) -> None:
    await set_profile(ledger(engine), "acme", build_issuer(**ROUTED_ISSUER))
    in_force = await together(gated, lambda: catalog.profile_in_force("acme"))
    gated.gate.set()
    profiles = await asyncio.gather(*in_force)
    assert {profile.version if profile else None for profile in profiles} == {1}
    assert gated.reads[tq.PROFILE_IN_FORCE] == 1

    fresh = Catalog(cast(Database, gated))
    versions = await together(gated, lambda: fresh.profile("acme", 1))
    gated.gate.set()
    assert {profile.version for profile in await asyncio.gather(*versions)} == {1}
    assert gated.reads[tq.PROFILE_VERSION] == 1

    # A refresh (a seal found another profile in force) never joins a read that may have begun
    # before the change: two refreshes, two reads.
    refreshes = await together(gated, lambda: catalog.refresh("acme"), callers=2)
    gated.gate.set()
    await asyncio.gather(*refreshes)
    assert gated.reads[tq.PROFILE_IN_FORCE] == 3
