"""An integrator account per tenant (``GAPLESS_INTEGRATORS_FILE``): two tenants whose accounts
are two ``gapless mock-integrator`` processes, served from one queue by one worker and one
recovery (real processes), by recovery's loop, ``invoice retry``, ``audit`` and ``doctor``; and
tenants on Nilvera accounts (fakes of Nilvera's API, each taking only its own key). Each
integrator's ledger is the oracle of where a document went."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.integrator.accounts import Accounts
from gapless.ledger.invoices import mark_error
from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.recovery.loop import RecoveryLoop, RecoveryOptions
from gapless.settings import Settings
from tests.acceptance.test_worker_processes import scrape
from tests.helpers import await_until, free_port, ledger, run_gapless, wait_until
from tests.integration.test_nilvera_adapter import ALIAS, USER, document
from tests.mock_client import MockIntegratorClient, running_mock
from tests.nilvera_fake import running_nilvera
from tests.recovery_support import Processes, invoice_rows, log_events, make_sending
from tests.worker_support import publish_many, sale

#: Quick breakers, so the test sees one open and close again within seconds.
KNOBS = {"GAPLESS_BREAKER_FAIL_MAX": "2", "GAPLESS_BREAKER_RESET_TIMEOUT_S": "1",
         "GAPLESS_RETRY_ATTEMPTS": "1", "GAPLESS_RETRY_WAIT_S": "0.05"}


@pytest.fixture
def two_mocks(log_dir: Path) -> Iterator[tuple[MockIntegratorClient, MockIntegratorClient]]:
    with running_mock(log_dir, seed=2) as acme_mock, running_mock(log_dir, seed=3) as globex_mock:
        yield acme_mock, globex_mock


@pytest.fixture
def accounts_file(tmp_path: Path,
                  two_mocks: tuple[MockIntegratorClient, MockIntegratorClient]) -> Path:
    acme_mock, globex_mock = two_mocks
    path = tmp_path / "integrators.toml"
    path.write_text(f"""
[tenants.acme]
adapter = "http"
url = "{acme_mock.url}"

[tenants.globex]
adapter = "http"
url = "{globex_mock.url}"
""", encoding="utf-8")
    return path


@pytest.fixture
async def two_series(engine: AsyncEngine) -> None:
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("globex", "GLX"))


def invoice(tenant: str, invoice_id: str) -> dict[str, Any]:
    body = sale(invoice_id)
    body.update(tenant=tenant, series="ABC" if tenant == "acme" else "GLX")
    return body


async def statuses(engine: AsyncEngine) -> dict[tuple[str, str], str]:
    async with engine.connect() as conn:
        result = await conn.execute(text("SELECT tenant, invoice_id, status FROM invoices"))
        return {(row.tenant, row.invoice_id): row.status for row in result}


def ledger_of(mock: MockIntegratorClient) -> set[tuple[str, str]]:
    return {(entry["tenant"], entry["invoice_id"]) for entry in mock.ledger()}


@pytest.mark.usefixtures("two_series")
async def test_each_tenant_issues_through_its_own_account_and_one_open_breaker_stops_only_it(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        mock_integrator: MockIntegratorClient, accounts_file: Path,
        two_mocks: tuple[MockIntegratorClient, MockIntegratorClient]) -> None:
    acme_mock, globex_mock = two_mocks
    env = {**KNOBS, "GAPLESS_INTEGRATORS_FILE": str(accounts_file)}
    port = free_port()
    procs.worker("worker", "--concurrency", "8", "--metrics-port", str(port), env=env)

    # 1. Each tenant's documents reach its own integrator, and only it.
    first = [invoice(tenant, f"{tenant}-{n}") for tenant in ("acme", "globex") for n in range(10)]
    await publish_many(settings, first)

    async def all_issued(count: int) -> bool:
        current = await statuses(engine)
        return len(current) == count and set(current.values()) == {"ISSUED"}

    await await_until(lambda: all_issued(20), 60, message="the first 20 invoices ISSUED")
    assert ledger_of(acme_mock) == {("acme", f"acme-{n}") for n in range(10)}
    assert ledger_of(globex_mock) == {("globex", f"globex-{n}") for n in range(10)}
    assert mock_integrator.ledger() == []  # the global account serves nobody here

    # 2. acme's integrator goes down: its account's breaker opens, globex goes on issuing.
    acme_mock.set_faults(down=True)
    second = [invoice(tenant, f"{tenant}-late-{n}") for tenant in ("acme", "globex")
              for n in range(10)]
    await publish_many(settings, second)

    async def globex_issued() -> bool:
        current = await statuses(engine)
        return all(current.get(("globex", f"globex-late-{n}")) == "ISSUED" for n in range(10))

    await await_until(globex_issued, 60,
                      message="globex's invoices ISSUED while acme's integrator is down")
    wait_until(lambda: scrape(port).get('gapless_breaker_state{name="worker:acme"}') == 2, 30,
               message="acme's breaker open")
    samples = scrape(port)
    assert samples['gapless_breaker_state{name="worker:globex"}'] == 0
    late = await statuses(engine)
    assert not any(late.get(("acme", f"acme-late-{n}")) == "ISSUED" for n in range(10))
    assert ledger_of(globex_mock) == {("globex", f"globex-{n}") for n in range(10)} | {
        ("globex", f"globex-late-{n}") for n in range(10)}
    parked = {key for key, status in late.items() if status == "ERROR"}
    assert parked, "some of acme's invoices were sealed before its breaker opened"
    assert {tenant for tenant, _ in parked} == {"acme"}

    # 3. acme's integrator is back: the worker issues what waited in the queue, and recovery
    # resends the parked ones through acme's account (not the global one, not globex's).
    acme_mock.set_faults(down=False)
    recovery = procs.recovery("recovery", "--interval", "0.5", env=env)
    await await_until(lambda: all_issued(40), 90, message="every invoice ISSUED")
    assert ledger_of(acme_mock) == {("acme", f"acme-{n}") for n in range(10)} | {
        ("acme", f"acme-late-{n}") for n in range(10)}
    assert len(acme_mock.ledger()) == 20  # nothing accepted twice
    assert len(globex_mock.ledger()) == 20
    assert mock_integrator.ledger() == []
    resent = {(record.get("tenant"), record.get("invoice_id"))
              for record in log_events(recovery, "orphan_found")}
    assert parked <= resent


async def test_a_tenant_on_a_nilvera_account_sends_with_its_own_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Nilvera accounts (fakes of Nilvera's API, each accepting only its own key): one key
    by environment variable, one by file; a tenant the file does not name uses the global
    key. Each tenant's send and recipient check reach its account with that account's key."""

    acme_key, globex_key, global_key = "nv-acme-3f9a", "nv-globex-71c2", "nv-global-0d4e"
    monkeypatch.setenv("ACME_NILVERA_KEY", acme_key)
    (tmp_path / "globex.key").write_text(f"{globex_key}\n", encoding="utf-8")
    async with running_nilvera(acme_key) as acme_nv, running_nilvera(globex_key) as globex_nv, \
            running_nilvera(global_key) as global_nv:
        for fake in (acme_nv, globex_nv, global_nv):
            fake.register(USER, (ALIAS, "Invoice"))
            fake.series["efatura"].add("ABC")
        path = tmp_path / "integrators.toml"
        path.write_text(f"""
[tenants.acme]
adapter = "nilvera"
url = "{acme_nv.url}"
api_key_env = "ACME_NILVERA_KEY"

[tenants.globex]
adapter = "nilvera"
url = "{globex_nv.url}"
api_key_file = "globex.key"
""", encoding="utf-8")
        settings = Settings(integrator_adapter="gapless.integrator.nilvera:NilveraIntegrator",
                            nilvera_url=global_nv.url, nilvera_api_key=global_key,
                            integrators_file=str(path), integrator_timeout_s=5.0)
        accounts = Accounts.open(settings, name="test-nilvera")
        try:
            for tenant in ("acme", "globex", "initech"):
                recipient = await accounts.recipient(tenant, USER)
                assert recipient.aliases == (ALIAS,)
                receipt = await accounts.send(document("ABC2026000000001", f"{tenant}-1",
                                                       tenant=tenant))
                assert receipt.number == "ABC2026000000001"
        finally:
            await accounts.aclose()
        for fake, key, tenant in ((acme_nv, acme_key, "acme"), (globex_nv, globex_key, "globex"),
                                  (global_nv, global_key, "initech")):
            assert [call.authorization for call in fake.sends()] == [f"Bearer {key}"]
            assert [call.authorization for call in fake.calls_to(f"/TaxNumber/{USER}")] == [
                f"Bearer {key}"]
            assert [entry.uuid for entry in fake.ledger] == [
                document("ABC2026000000001", f"{tenant}-1", tenant=tenant).uuid]


@pytest.mark.usefixtures("two_series")
async def test_recovery_claims_around_a_tenant_whose_account_is_down(
        engine: AsyncEngine, settings: Settings, accounts_file: Path,
        two_mocks: tuple[MockIntegratorClient, MockIntegratorClient]) -> None:
    """acme's orphans are older and more than a batch, and acme's integrator is down: once
    acme's breaker is open, recovery claims only the others, so globex's orphan is resent
    through globex's account rather than waiting behind acme's."""

    acme_mock, globex_mock = two_mocks
    # More than a round's claims (10 of --batch 2), so none reaches globex's by chance.
    await make_sending(engine, [f"acme-{n}" for n in range(24)], tenant="acme", series="ABC")
    await make_sending(engine, ["globex-0"], tenant="globex", series="GLX")
    async with engine.begin() as conn:
        await conn.execute(text(
            "UPDATE invoices SET sending_since = now() - CASE tenant WHEN 'acme' "
            "THEN interval '2 hours' ELSE interval '1 hour' END"))
    acme_mock.set_faults(down=True)
    configured = settings.with_overrides(
        integrators_file=str(accounts_file), breaker_fail_max=1, breaker_reset_timeout_s=60,
        retry_attempts=1)
    accounts = Accounts.open(configured, name="test-recovery")
    try:
        loop = RecoveryLoop(ledger(engine), accounts, RecoveryOptions(
            batch=2, stuck_after_s=0, breaker_reset_s=60, gib=None, settings=configured))
        for _ in range(3):
            await loop.run_round()
        assert accounts.guard("acme").state == "open"
        assert accounts.guard("globex").state == "closed"
        assert accounts.scope().excluded == ("acme",)
    finally:
        await accounts.aclose()
    current = await invoice_rows(engine)
    assert current["globex-0"].status == "ISSUED"
    assert ledger_of(globex_mock) == {("globex", "globex-0")}
    assert not any(current[f"acme-{n}"].status == "ISSUED" for n in range(24))
    acme_mock.set_faults(down=False)
    assert acme_mock.ledger() == []


@pytest.mark.usefixtures("two_series")
async def test_doctor_checks_each_account_and_audit_judges_each_tenant_by_its_own(
        engine: AsyncEngine, settings: Settings, procs: Processes,
        integrated_env: dict[str, str], accounts_file: Path,
        two_mocks: tuple[MockIntegratorClient, MockIntegratorClient]) -> None:


    acme_mock, globex_mock = two_mocks
    env = {**integrated_env, "GAPLESS_INTEGRATORS_FILE": str(accounts_file)}
    procs.worker("worker", "--concurrency", "4",
                 env={"GAPLESS_INTEGRATORS_FILE": str(accounts_file)})
    await publish_many(settings, [invoice(tenant, f"{tenant}-{n}")
                                  for tenant in ("acme", "globex") for n in range(3)])

    async def issued() -> bool:
        current = await statuses(engine)
        return len(current) == 6 and set(current.values()) == {"ISSUED"}

    await await_until(issued, 60, message="6 invoices ISSUED")
    assert ledger_of(acme_mock) == {("acme", f"acme-{n}") for n in range(3)}
    assert ledger_of(globex_mock) == {("globex", f"globex-{n}") for n in range(3)}

    # audit --integrator: each tenant against its own account's ledger, nothing missing.
    result = run_gapless(["audit", "--integrator", "--json"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["violations"] == []
    assert report["integrator"]["documents"] == 6

    # doctor: one line per account; acme's integrator down fails acme's line only, naming the
    # file's key that sets its endpoint.
    acme_mock.set_faults(down=True)
    as_json = run_gapless(["doctor", "--json"], env, timeout=60)
    assert as_json.returncode == 1, as_json.stdout + as_json.stderr
    lines = [check for check in json.loads(as_json.stdout)["checks"]
             if check["name"] == "integrator"]
    assert [line["detail"].split(" (")[0] for line in lines] == [
        "account global", "account acme", "account globex"]
    assert [line["status"] for line in lines] == ["ok", "fail", "ok"]
    assert lines[0]["detail"].startswith("account global (tenants the file does not name): ")
    assert acme_mock.url.split("//")[1] in lines[1]["detail"]
    assert lines[1]["hint"] == ("is the integrator running? check GAPLESS_INTEGRATORS_FILE "
                                "[tenants.acme] url")
    table = run_gapless(["doctor"], env, timeout=60)
    assert sum(line.split()[1] == "integrator" for line in table.stdout.splitlines()) == 3
    acme_mock.set_faults(down=False)


@pytest.mark.usefixtures("two_series")
async def test_invoice_retry_resends_through_the_invoices_own_account(
        engine: AsyncEngine, mock_integrator: MockIntegratorClient,
        integrated_env: dict[str, str], accounts_file: Path,
        two_mocks: tuple[MockIntegratorClient, MockIntegratorClient]) -> None:
    """``gapless invoice retry`` of globex's ERROR invoice: the probe and the resend go to
    globex's integrator, even with the global one down and no --tenant given."""

    acme_mock, globex_mock = two_mocks
    [sending] = await make_sending(engine, ["globex-err"], tenant="globex", series="GLX")
    await mark_error(ledger(engine), sending, "TransientIntegratorError: HTTP 500", None)
    mock_integrator.set_faults(down=True)
    env = {**integrated_env, "GAPLESS_INTEGRATORS_FILE": str(accounts_file)}
    result = run_gapless(["invoice", "retry", "globex-err"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (await invoice_rows(engine))["globex-err"].status == "ISSUED"
    assert ledger_of(globex_mock) == {("globex", "globex-err")}
    assert acme_mock.ledger() == []
    mock_integrator.set_faults(down=False)
    assert mock_integrator.ledger() == []


async def test_recipient_answers_are_cached_per_account(
        engine: AsyncEngine, settings: Settings, accounts_file: Path,
        two_mocks: tuple[MockIntegratorClient, MockIntegratorClient]) -> None:
    """Two accounts may see different registries (a test and a live one): each tenant gets its
    own account's answer, and each answer is cached under its account — the other tenant's
    check asks its own account, never reuses the first's."""
    from gapless.issuing.routing import Router
    from gapless.ledger.catalog import Catalog

    acme_mock, globex_mock = two_mocks
    tax_id = "4840847211"
    acme_mock.set_recipients({tax_id: ["urn:mail:defaultpk@acme-view.example"]})
    globex_mock.set_recipients({})
    accounts = Accounts.open(settings.model_copy(update={"integrators_file": str(accounts_file)}),
                             name="worker")
    try:
        db = ledger(engine)
        router = Router(db, Catalog(db), accounts, ttl_s=3600)
        seen_by_acme = await router.recipient("acme", tax_id)
        seen_by_globex = await router.recipient("globex", tax_id)
        assert (seen_by_acme.registered, seen_by_acme.aliases) == (
            True, ("urn:mail:defaultpk@acme-view.example",))
        assert (seen_by_globex.registered, seen_by_globex.aliases) == (False, ())
        # Cached: both answered again from PostgreSQL while the integrators are silent.
        acme_mock.set_faults(down=True)
        globex_mock.set_faults(down=True)
        assert (await router.recipient("acme", tax_id)).registered is True
        assert (await router.recipient("globex", tax_id)).registered is False
    finally:
        await accounts.aclose()
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT account, registered FROM recipients WHERE tax_id = :t ORDER BY account"),
            {"t": tax_id})).all()
    assert [(row.account, row.registered) for row in rows] == [("acme", True), ("globex", False)]
