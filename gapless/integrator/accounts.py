"""Integrator accounts per tenant (``GAPLESS_INTEGRATORS_FILE``) and the guard that routes by it.

The file (TOML) gives a tenant its own integrator account::

    [tenants.acme]
    adapter = "nilvera"                     # or "http" (the mock's protocol), or "module:Class"
    url = "https://api.nilvera.com"         # default: the adapter's global setting
    api_key_env = "ACME_NILVERA_API_KEY"    # or api_key_file = "/run/secrets/acme_nilvera"

A tenant the file names uses its account in every process; any other tenant uses the global
settings (``GAPLESS_INTEGRATOR_ADAPTER``, ``GAPLESS_INTEGRATOR_URL``, ``GAPLESS_NILVERA_URL``
and ``GAPLESS_NILVERA_API_KEY``).
Tenants whose adapter and settings are equal share one account: one adapter (one connection pool,
so one limit on concurrent calls), one circuit breaker. A tenant whose settings equal the global
ones uses the global account.

Guarantees:

* **Secrets are never inline.** A key is named by an environment variable (``api_key_env``) or a
  file (``api_key_file``, relative to the TOML file's folder); a key written into the file is
  refused with a one-line error naming the tenant and the key, and no message ever quotes a secret.
* **A bad file stops the process at start** (:func:`load_accounts` raises ConfigurationError in
  one line): missing or unreadable, not TOML, an unknown key or adapter, an environment variable
  that is not set, a key file that cannot be read.
* **One path.** With no file, :class:`Accounts` holds one account (the global one) and behaves
  exactly as a single :class:`~gapless.integrator.guard.GuardedIntegrator`; with a file, each call
  goes to the guard of its tenant's account (breaker, retries, pool per account).

The recipient answers (is this tax id an e-Fatura user?) are asked through the tenant's account;
their cache in PostgreSQL stays keyed by tax id, because the answer is GİB's registry, the same
whichever account asks it (:mod:`gapless.issuing.routing`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from gapless.errors import ConfigurationError
from gapless.integrator.base import (
    Document,
    GibStatus,
    Receipt,
    Recipient,
    endpoint,
    load_integrator,
)
from gapless.integrator.guard import EVERY_TENANT, GuardedIntegrator, TenantScope
from gapless.message.fields import Tenant
from gapless.plugins import load_factory

if TYPE_CHECKING:
    from gapless.settings import Settings

#: The variable that names the file (every message about the file starts with it).
FILE_SETTING: Final = "GAPLESS_INTEGRATORS_FILE"
#: The name of the account of the global settings (doctor, logs).
GLOBAL: Final = "global"
#: A larger file is refused unread (hundreds of tenants take a few dozen KiB).
MAX_FILE_BYTES: Final = 1 << 20
#: A larger key file is refused unread.
MAX_SECRET_BYTES: Final = 4096
#: Keys that would carry a secret inline: refused, whatever the adapter.
INLINE_SECRETS: Final = frozenset({"api_key", "nilvera_api_key", "token", "password", "secret"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ACCOUNT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class AdapterKind:
    """What the file's short adapter name stands for: the import path, the setting its ``url``
    sets, and the setting its key (if any) sets."""

    path: str
    url_setting: str
    secret_setting: str | None = None


#: The adapters the file may name by a short name.
ADAPTERS: Final[Mapping[str, AdapterKind]] = {
    "http": AdapterKind("gapless.integrator.http:HttpIntegrator", "integrator_url"),
    "nilvera": AdapterKind("gapless.integrator.nilvera:NilveraIntegrator", "nilvera_url",
                           "nilvera_api_key"),
}


class _Entry(BaseModel):
    """One ``[tenants.NAME]`` table."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    adapter: str
    url: str | None = Field(None, pattern=r"^https?://[^\s/?#@]+(/[^\s?#]*)?$")
    api_key_env: str | None = None
    api_key_file: str | None = None
    timeout_s: float | None = Field(None, gt=0)
    max_connections: int | None = Field(None, ge=1)
    account: str | None = None


_TENANT: Final = TypeAdapter(Tenant)


@dataclass(frozen=True)
class Account:
    """One integrator account: the settings its adapter is built with, and who uses it."""

    name: str
    settings: Settings
    #: The tenants the file gives this account (empty for the global account's own).
    tenants: tuple[str, ...]
    #: Where the setting of its endpoint is written: ``GAPLESS_NILVERA_URL``, or the file's key
    #: (``GAPLESS_INTEGRATORS_FILE [tenants.acme] url``).
    endpoint_setting: str

    @property
    def endpoint(self) -> str:
        """The URL the account's adapter sends to."""
        return endpoint(self.settings)[0]

    @property
    def is_global(self) -> bool:
        return self.name == GLOBAL


@dataclass(frozen=True)
class AccountPlan:
    """Every account of the configuration, and which tenant uses which."""

    accounts: tuple[Account, ...]  # the global one first
    by_tenant: Mapping[str, Account]

    def of(self, tenant: str) -> Account:
        """The tenant's account: its own if the file names it, else the global one."""
        return self.by_tenant.get(tenant, self.accounts[0])


def load_accounts(settings: Settings) -> AccountPlan:
    """Read ``settings.integrators_file`` (when set) and resolve every account's settings.

    Raises ConfigurationError (one line, starting ``GAPLESS_INTEGRATORS_FILE``) for a file that
    cannot be used; no secret is ever part of a message.
    """
    global_account = Account(GLOBAL, settings, (), endpoint(settings)[1])
    if not settings.integrators_file:
        return AccountPlan((global_account,), {})
    path = Path(settings.integrators_file)
    entries = _read(path)
    groups: dict[tuple[Any, ...], list[tuple[str, _Entry, Settings, str]]] = {}
    global_key = _key(settings)
    for tenant, entry in entries.items():
        derived, endpoint_setting = _settings_of(path, tenant, entry, settings)
        groups.setdefault(_key(derived), []).append((tenant, entry, derived, endpoint_setting))
    accounts = [global_account]
    by_tenant: dict[str, Account] = {}
    names: dict[str, str] = {GLOBAL: "the global settings"}
    for key, members in groups.items():
        tenants = tuple(sorted(tenant for tenant, *_ in members))
        if key == global_key:
            account = Account(GLOBAL, settings, tenants, global_account.endpoint_setting)
            accounts[0] = account
        else:
            name = _account_name(path, members)
            if name in names:
                raise _error(f"tenant {tenants[0]!r}: account name {name!r} is also the name of "
                             f"{names[name]}; give the account its own name", path)
            names[name] = f"the account of tenant {tenants[0]!r}"
            _, _, derived, endpoint_setting = min(members, key=lambda member: member[0])
            account = Account(name, derived, tenants, endpoint_setting)
            accounts.append(account)
        by_tenant.update(dict.fromkeys(tenants, account))
    accounts[1:] = sorted(accounts[1:], key=lambda account: account.name)
    return AccountPlan(tuple(accounts), dict(sorted(by_tenant.items())))


def secret_variables(path: str) -> set[str]:
    """The environment variables the accounts file names for its secrets (``api_key_env``), so
    that start-up does not call them unknown settings; empty when the file cannot be read (its
    loader says why)."""
    try:
        entries = _read(Path(path))
    except ConfigurationError:
        return set()
    return {entry.api_key_env for entry in entries.values() if entry.api_key_env}


def _error(detail: str, path: Path) -> ConfigurationError:
    return ConfigurationError(f"{FILE_SETTING} ({path}): {detail}")


def _read(path: Path) -> dict[str, _Entry]:
    """The file's tenant tables, checked (not yet resolved)."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _error(f"cannot be read ({exc.strerror or type(exc).__name__})", path) from None
    if len(raw) > MAX_FILE_BYTES:
        raise _error(f"is larger than {MAX_FILE_BYTES} bytes", path)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _error("is not UTF-8 text", path) from None
    except tomllib.TOMLDecodeError as exc:
        raise _error(f"is not valid TOML ({exc})", path) from None
    unknown = sorted(set(data) - {"tenants"})
    if unknown:
        raise _error(f"unknown key {unknown[0]!r} (the file holds [tenants.NAME] tables)", path)
    tenants = data.get("tenants", {})
    if not isinstance(tenants, dict):
        raise _error("'tenants' must be tables: [tenants.NAME]", path)
    entries: dict[str, _Entry] = {}
    for tenant, table in tenants.items():
        try:
            _TENANT.validate_python(tenant)
        except ValidationError:
            raise _error(f"[tenants.{tenant}]: not a valid tenant name", path) from None
        if not isinstance(table, dict):
            raise _error(f"tenant {tenant!r}: must be a table ([tenants.{tenant}])", path)
        inline = sorted(INLINE_SECRETS & set(table))
        if inline:
            raise _error(f"tenant {tenant!r}: {inline[0]} is a secret and is never written in "
                         "the file; name an environment variable (api_key_env) or a file "
                         "(api_key_file)", path)
        try:
            entries[tenant] = _Entry.model_validate(table)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"]) or "table"
            what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
            raise _error(f"tenant {tenant!r}: {key}: {what}", path) from None
    return entries


def _adapter(path: Path, tenant: str, entry: _Entry) -> AdapterKind:
    """The entry's adapter: a short name, or an import path that loads."""
    kind = ADAPTERS.get(entry.adapter)
    if kind is not None:
        return kind
    known = next((kind for kind in ADAPTERS.values() if kind.path == entry.adapter), None)
    if known is not None:
        return known
    if ":" not in entry.adapter:
        raise _error(f"tenant {tenant!r}: adapter {entry.adapter!r} is unknown (http, nilvera, "
                     "or module:Class)", path)
    try:
        factory = load_factory(entry.adapter, setting=f"{FILE_SETTING} adapter",
                               shape="module:Class", what="integrator adapter")
    except ConfigurationError as exc:
        raise _error(f"tenant {tenant!r}: adapter: {exc}", path) from None
    url_setting = getattr(factory, "endpoint_setting", "integrator_url")
    return AdapterKind(entry.adapter, url_setting if isinstance(url_setting, str)
                       else "integrator_url")


def _secret(path: Path, tenant: str, entry: _Entry) -> str | None:
    """The key the entry names (by variable or file); None when it names none."""
    if entry.api_key_env is not None and entry.api_key_file is not None:
        raise _error(f"tenant {tenant!r}: give api_key_env or api_key_file, not both", path)
    if entry.api_key_env is not None:
        name = entry.api_key_env
        if not _ENV_NAME.fullmatch(name):
            raise _error(f"tenant {tenant!r}: api_key_env: not an environment variable's name",
                         path)
        value = os.environ.get(name, "").strip()
        if not value:
            raise _error(f"tenant {tenant!r}: api_key_env names {name}, which is not set (or "
                         "empty)", path)
        return value
    if entry.api_key_file is not None:
        secret_path = path.parent / entry.api_key_file
        try:
            with secret_path.open("rb") as file:
                raw = file.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            raise _error(f"tenant {tenant!r}: api_key_file {secret_path} cannot be read "
                         f"({exc.strerror or type(exc).__name__})", path) from None
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            value = ""
        if len(raw) > MAX_SECRET_BYTES or not value or any(c.isspace() for c in value):
            raise _error(f"tenant {tenant!r}: api_key_file {secret_path} does not hold one key "
                         "(one line of text)", path)
        return value
    return None


def _settings_of(path: Path, tenant: str, entry: _Entry,
                 base: Settings) -> tuple[Settings, str]:
    """The settings the tenant's adapter is built with, and where its endpoint is written."""
    kind = _adapter(path, tenant, entry)
    secret = _secret(path, tenant, entry)
    if secret is not None and kind.secret_setting is None:
        raise _error(f"tenant {tenant!r}: the {entry.adapter} adapter takes no api key", path)
    if secret is None and kind.secret_setting is not None:
        raise _error(f"tenant {tenant!r}: the {entry.adapter} adapter needs a key: "
                     "api_key_env or api_key_file", path)
    update: dict[str, Any] = {"integrator_adapter": kind.path, "integrators_file": ""}
    if entry.url is not None:
        update[kind.url_setting] = entry.url
    if kind.secret_setting is not None:
        update[kind.secret_setting] = secret
    if entry.timeout_s is not None:
        update["integrator_timeout_s"] = entry.timeout_s
    if entry.max_connections is not None:
        update["integrator_max_connections"] = entry.max_connections
    where = (f"{FILE_SETTING} [tenants.{tenant}] url" if entry.url is not None
             else f"GAPLESS_{kind.url_setting.upper()}")
    # Validated above field by field; model_copy keeps the process's other settings as they are.
    return base.model_copy(update=update), where


def _key(settings: Settings) -> tuple[Any, ...]:
    """What makes two accounts one: the adapter and every setting it is built with (the key
    as a digest, so it is not kept twice in memory)."""
    kind = next((kind for kind in ADAPTERS.values()
                 if kind.path == settings.integrator_adapter), None)
    secret = getattr(settings, kind.secret_setting) if kind and kind.secret_setting else ""
    return (settings.integrator_adapter, endpoint(settings)[0],
            hashlib.sha256(str(secret).encode()).hexdigest(), settings.integrator_timeout_s,
            settings.integrator_max_connections)


def _account_name(path: Path, members: list[tuple[str, _Entry, Settings, str]]) -> str:
    """The name tenants sharing one account give it, or the first tenant's name."""
    named = {entry.account for _, entry, _, _ in members if entry.account is not None}
    tenants = sorted(tenant for tenant, *_ in members)
    if len(named) > 1:
        raise _error(f"tenants {tenants[0]!r} and others share one account (the same adapter "
                     f"and settings) but name it differently: {', '.join(sorted(named))}", path)
    if not named:
        return tenants[0]
    name = named.pop()
    if not _ACCOUNT_NAME.fullmatch(name):
        raise _error(f"tenant {tenants[0]!r}: account: {name!r} is not a name (letters, digits, "
                     "'.', '_', '-'; at most 63)", path)
    return name


class Accounts:
    """The process's guarded integrator: one :class:`GuardedIntegrator` per account, each call
    given to the guard of its tenant's account (see the module docstring).

    The guard of the global account is named as the process names it (``worker``); another
    account's is ``worker:<account>`` — the ``name`` label of the breaker and call metrics.
    """

    def __init__(self, plan: AccountPlan, guards: Mapping[str, GuardedIntegrator]) -> None:
        self.plan = plan
        self._guards = dict(guards)
        self._global = self._guards[plan.accounts[0].name]
        self._by_tenant = {tenant: self._guards[account.name]
                           for tenant, account in plan.by_tenant.items()}
        #: Every account can look a number up; otherwise callers ask by UUID (every one can).
        self.looks_up_numbers = all(guard.looks_up_numbers for guard in self._guards.values())
        #: Every account answers GİB's verdict (else nobody is asked, as for one such adapter).
        self.follows_gib_status = all(guard.follows_gib_status
                                      for guard in self._guards.values())

    @classmethod
    def open(cls, settings: Settings, *, name: str) -> Accounts:
        """Build every account's adapter and guard (``name``: the process's guard name).

        Raises ConfigurationError for a file or an adapter that cannot be used (the built-in
        adapters open no connection before their first call).
        """
        plan = load_accounts(settings)
        guards = {account.name: GuardedIntegrator(
                      load_integrator(account.settings), account.settings,
                      name=name if account.is_global else f"{name}:{account.name}")
                  for account in plan.accounts}
        return cls(plan, guards)

    def guard(self, tenant: str) -> GuardedIntegrator:
        """The guard of the tenant's account."""
        return self._by_tenant.get(tenant, self._global)

    def guards(self) -> Iterable[tuple[Account, GuardedIntegrator]]:
        """Every account with its guard, the global one first."""
        return ((account, self._guards[account.name]) for account in self.plan.accounts)

    # -- the Guard protocol ----------------------------------------------------------------------

    @property
    def state(self) -> str:
        """The breaker state work can flow through: ``closed`` while any account's breaker is
        closed, else ``half-open`` while any is, else ``open`` (each account's own state is in
        its ``gapless_breaker_state`` sample)."""
        states = {guard.state for guard in self._guards.values()}
        return next(state for state in ("closed", "half-open", "open") if state in states)

    def accepting(self, tenant: str | None = None) -> bool:
        """Whether a call for ``tenant`` would be let through by its account's breaker; without
        a tenant, whether any account's would (so there is work a paused loop could do)."""
        if tenant is not None:
            return self.guard(tenant).accepting()
        return any(guard.accepting() for guard in self._guards.values())

    async def probe(self, tenant: str, uuid: str) -> Receipt | None:
        """A lookup that consumes nothing, through the first account that lets a call through
        (the global one when none does: its breaker answers ``IntegratorUnavailable``)."""
        guard = next((guard for guard in self._guards.values() if guard.accepting()),
                     self._global)
        return await guard.lookup_uuid(tenant, uuid)

    def scope(self) -> TenantScope:
        """Whose work may be claimed now: without the tenants of the accounts that refuse
        calls, or — when the global account refuses — only the tenants of those that do not."""
        refusing = {name for name, guard in self._guards.items() if not guard.accepting()}
        if not refusing:
            return EVERY_TENANT
        named = self.plan.by_tenant.items()
        if GLOBAL not in refusing:
            return TenantScope(excluded=tuple(tenant for tenant, account in named
                                              if account.name in refusing))
        return TenantScope(only=tuple(tenant for tenant, account in named
                                      if account.name not in refusing))

    async def send(self, document: Document) -> Receipt:
        return await self.guard(document.tenant).send(document)

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        return await self.guard(tenant).lookup(tenant, number)

    async def lookup_uuid(self, tenant: str, uuid: str) -> Receipt | None:
        return await self.guard(tenant).lookup_uuid(tenant, uuid)

    async def status(self, tenant: str, uuid: str) -> GibStatus | None:
        return await self.guard(tenant).status(tenant, uuid)

    async def recipient(self, tenant: str, tax_id: str) -> Recipient:
        return await self.guard(tenant).recipient(tenant, tax_id)

    def registry_of(self, tenant: str) -> str:
        """The name of ``tenant``'s account ('' for the global one), under which its recipient
        answers are cached: accounts may see different registries (a test and a live one)."""
        account = self.plan.by_tenant.get(tenant)
        return "" if account is None or account.is_global else account.name

    async def aclose(self) -> None:
        """Close every account's adapter."""
        for guard in self._guards.values():
            await guard.aclose()
