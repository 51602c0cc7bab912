"""``GAPLESS_INTEGRATORS_FILE``: reading, checking and resolving the per-tenant accounts."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from gapless.cli import main
from gapless.errors import ConfigurationError
from gapless.integrator.accounts import GLOBAL, Accounts, load_accounts
from gapless.integrator.base import TransientIntegratorError
from gapless.integrator.guard import (
    EVERY_TENANT,
    GuardedIntegrator,
    IntegratorUnavailable,
    TenantScope,
)
from gapless.settings import Settings

NILVERA = "gapless.integrator.nilvera:NilveraIntegrator"
HTTP = "gapless.integrator.http:HttpIntegrator"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "integrators.toml"
    path.write_text(text, encoding="utf-8")
    return path


def settings_for(path: Path, **overrides: object) -> Settings:
    return Settings(integrators_file=str(path), **overrides)  # type: ignore[arg-type]


def refusal(path: Path) -> str:
    with pytest.raises(ConfigurationError) as caught:
        load_accounts(settings_for(path))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"GAPLESS_INTEGRATORS_FILE ({path}): ")
    return message


def test_without_a_file_every_tenant_uses_the_global_settings() -> None:
    settings = Settings()
    plan = load_accounts(settings)
    assert [account.name for account in plan.accounts] == [GLOBAL]
    assert plan.of("acme").settings is settings
    assert plan.of("acme").endpoint_setting == "GAPLESS_INTEGRATOR_URL"


def test_a_valid_file_gives_each_tenant_its_account_and_merges_equal_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_NILVERA_KEY", "acme-secret-key")
    (tmp_path / "globex.key").write_text("globex-secret-key\n", encoding="utf-8")
    path = write(tmp_path, """
        [tenants.acme]
        adapter = "nilvera"
        url = "https://api.nilvera.com"
        api_key_env = "ACME_NILVERA_KEY"

        [tenants.acme-export]
        adapter = "nilvera"
        url = "https://api.nilvera.com"
        api_key_env = "ACME_NILVERA_KEY"
        account = "acme-group"

        [tenants.globex]
        adapter = "nilvera"
        api_key_file = "globex.key"
        max_connections = 8

        [tenants.initech]
        adapter = "http"
        url = "http://127.0.0.1:8099"
        timeout_s = 2.5
    """)
    settings = settings_for(path, nilvera_url="https://apitest.nilvera.com",
                            nilvera_api_key="global-key")
    plan = load_accounts(settings)
    assert [account.name for account in plan.accounts] == [GLOBAL, "acme-group", "globex",
                                                           "initech"]
    acme = plan.of("acme")
    assert plan.of("acme-export") is acme
    assert acme.tenants == ("acme", "acme-export")
    assert acme.settings.integrator_adapter == NILVERA
    assert acme.settings.nilvera_url == "https://api.nilvera.com"
    assert acme.settings.nilvera_api_key == "acme-secret-key"
    assert acme.endpoint == "https://api.nilvera.com"
    assert acme.endpoint_setting == "GAPLESS_INTEGRATORS_FILE [tenants.acme] url"
    globex = plan.of("globex")
    assert globex.settings.nilvera_api_key == "globex-secret-key"  # the file's line, stripped
    assert globex.settings.nilvera_url == "https://apitest.nilvera.com"  # the global default
    assert globex.endpoint_setting == "GAPLESS_NILVERA_URL"
    assert globex.settings.integrator_max_connections == 8
    initech = plan.of("initech")
    assert initech.settings.integrator_adapter == HTTP
    assert initech.settings.integrator_url == "http://127.0.0.1:8099"
    assert initech.settings.integrator_timeout_s == 2.5
    # The account's settings are the process's otherwise, and name no file of their own.
    assert initech.settings.database_url == settings.database_url
    assert initech.settings.integrators_file == ""
    # A tenant the file does not name: the global settings, untouched.
    assert plan.of("hooli").settings is settings
    assert plan.of("hooli").name == GLOBAL


def test_a_tenant_with_the_global_settings_shares_the_global_account(tmp_path: Path) -> None:
    path = write(tmp_path, '[tenants.acme]\nadapter = "http"\nurl = "http://127.0.0.1:8085"\n')
    plan = load_accounts(settings_for(path, integrator_url="http://127.0.0.1:8085"))
    assert [account.name for account in plan.accounts] == [GLOBAL]
    assert plan.of("acme").tenants == ("acme",)


@pytest.mark.parametrize("key", ["api_key", "token", "nilvera_api_key"])
def test_an_inline_secret_is_refused_naming_the_tenant_and_the_key(
        tmp_path: Path, key: str) -> None:
    path = write(tmp_path, f'[tenants.acme]\nadapter = "nilvera"\n{key} = "s3cr3t-value"\n')
    message = refusal(path)
    assert f"tenant 'acme': {key} is a secret" in message
    assert "api_key_env" in message
    assert "api_key_file" in message
    assert "s3cr3t-value" not in message


def test_an_environment_variable_that_is_not_set_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLOBEX_KEY_NOT_SET", raising=False)
    path = write(tmp_path, '[tenants.globex]\nadapter = "nilvera"\n'
                           'api_key_env = "GLOBEX_KEY_NOT_SET"\n')
    assert "tenant 'globex': api_key_env names GLOBEX_KEY_NOT_SET, which is not set" in \
        refusal(path)


def test_a_key_file_must_exist_and_hold_one_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[tenants.acme]\nadapter = "nilvera"\napi_key_file = "acme.key"\n')
    assert f"api_key_file {tmp_path / 'acme.key'} cannot be read" in refusal(path)
    (tmp_path / "acme.key").write_text("two words\n", encoding="utf-8")
    message = refusal(path)
    assert "does not hold one key" in message
    assert "two words" not in message
    (tmp_path / "acme.key").write_text("the-key\n", encoding="utf-8")
    assert load_accounts(settings_for(path)).of("acme").settings.nilvera_api_key == "the-key"


@pytest.mark.parametrize(("text", "expected"), [
    ('[tenants.acme\nadapter = "http"', "is not valid TOML"),
    ('[tenants.acme]\nadapter = "soap"\n', "tenant 'acme': adapter 'soap' is unknown"),
    ('[tenants.acme]\nadapter = "no.such.module:Adapter"\n', "tenant 'acme': adapter: cannot"),
    ('[tenants.acme]\nadapter = "http"\nurll = "http://x"\n', "tenant 'acme': urll: unknown key"),
    ('[tenants.acme]\nurl = "http://127.0.0.1:1"\n', "tenant 'acme': adapter: Field required"),
    ('[tenants.acme]\nadapter = "http"\nurl = "ftp://x"\n', "tenant 'acme': url:"),
    ('[tenants.acme]\nadapter = "nilvera"\n', "the nilvera adapter needs a key"),
    ('[tenants.acme]\nadapter = "http"\napi_key_env = "HOME"\n', "takes no api key"),
    ('[tenants."no spaces"]\nadapter = "http"\n', "not a valid tenant name"),
    ('[accounts.acme]\nadapter = "http"\n', "unknown key 'accounts'"),
])
def test_a_bad_file_is_refused_in_one_line(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in refusal(write(tmp_path, text))


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    assert "cannot be read (No such file or directory)" in refusal(tmp_path / "absent.toml")


def test_two_accounts_cannot_take_one_name(tmp_path: Path) -> None:
    path = write(tmp_path, """
        [tenants.acme]
        adapter = "http"
        url = "http://127.0.0.1:8091"
        account = "shared"

        [tenants.globex]
        adapter = "http"
        url = "http://127.0.0.1:8092"
        account = "shared"
    """)
    assert "account name 'shared' is also the name of" in refusal(path)


def test_one_account_has_one_name(tmp_path: Path) -> None:
    path = write(tmp_path, """
        [tenants.acme]
        adapter = "http"
        url = "http://127.0.0.1:8091"
        account = "north"

        [tenants.globex]
        adapter = "http"
        url = "http://127.0.0.1:8091"
        account = "south"
    """)
    assert "share one account (the same adapter and settings) but name it differently: north, " \
        "south" in refusal(path)
    write(tmp_path, '[tenants.acme]\nadapter = "http"\nurl = "http://127.0.0.1:8093"\n'
                    'account = "no/slash"\n')
    assert "account: 'no/slash' is not a name" in refusal(path)


def test_every_command_refuses_a_bad_file_with_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, '[tenants.acme]\nadapter = "nilvera"\napi_key = "s3cr3t"\n')
    monkeypatch.setenv("GAPLESS_INTEGRATORS_FILE", str(path))
    for command in (["doctor"], ["worker"], ["recovery", "--once"], ["audit"]):
        with pytest.raises(SystemExit) as exited:
            main(command)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "tenant 'acme': api_key is a secret" in err
        assert "s3cr3t" not in err


class Down:
    """An integrator that never answers (every lookup fails as a timeout would)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def lookup_uuid(self, tenant: str, uuid: str) -> None:
        self.asked.append(tenant)
        raise TransientIntegratorError("scripted: no answer")

    async def aclose(self) -> None:
        return None


async def test_each_account_has_its_own_breaker_and_the_scope_follows_them(
        tmp_path: Path) -> None:
    path = write(tmp_path, """
        [tenants.acme]
        adapter = "http"
        url = "http://127.0.0.1:8091"

        [tenants.globex]
        adapter = "http"
        url = "http://127.0.0.1:8092"
    """)
    settings = settings_for(path, breaker_fail_max=1, breaker_reset_timeout_s=3600,
                            retry_attempts=1)
    plan = load_accounts(settings)
    adapters = {account.name: Down() for account in plan.accounts}
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    accounts = Accounts(plan, {name: GuardedIntegrator(adapter, settings,  # type: ignore[arg-type]
                                                       name=f"{prefix}:{name}")
                               for name, adapter in adapters.items()})
    assert (accounts.state, accounts.scope()) == ("closed", EVERY_TENANT)

    with pytest.raises(TransientIntegratorError):
        await accounts.lookup_uuid("acme", "u-1")  # acme's breaker opens
    assert adapters["acme"].asked == ["acme"]
    assert not accounts.accepting("acme")
    assert accounts.accepting("globex")
    assert accounts.accepting("hooli")  # not named: the global account
    assert accounts.accepting()
    assert accounts.state == "closed"  # work still flows through the others
    assert accounts.scope() == TenantScope(excluded=("acme",))
    with pytest.raises(IntegratorUnavailable):
        await accounts.lookup_uuid("acme", "u-2")  # refused without a call
    assert adapters["acme"].asked == ["acme"]

    with pytest.raises(TransientIntegratorError):
        await accounts.lookup_uuid("hooli", "u-3")  # the global account's breaker opens
    assert accounts.scope() == TenantScope(only=("globex",))
    with pytest.raises(TransientIntegratorError):
        await accounts.probe("probe", "u-4")  # through the one account still answering
    assert adapters["globex"].asked == ["probe"]
    assert not accounts.accepting()
    assert accounts.state == "open"
    assert accounts.scope() == TenantScope(only=())
