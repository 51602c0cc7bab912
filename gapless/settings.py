"""The one settings object: ``GAPLESS_*`` environment variables, overridden by CLI flags."""

from __future__ import annotations

import difflib
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gapless.ids import MAX_CLUSTER_ID

QueueType = Literal["classic", "quorum"]
#: Deliveries of one message (quorum mode) before RabbitMQ dead-letters it: high enough that
#: requeues during outages and restarts never reach it, low enough that a message killing its
#: worker every time stops looping.
DEFAULT_DELIVERY_LIMIT = 20


class Settings(BaseSettings):
    """Every knob of every gapless process. Names and defaults of the first five are contract."""

    model_config = SettingsConfigDict(env_prefix="GAPLESS_", extra="ignore", frozen=True)

    database_url: str = "postgresql://postgres@127.0.0.1:5432/gapless"
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    queue: str = "invoices"
    integrator_url: str = "http://127.0.0.1:8085"
    cluster_id: int = 0
    queue_type: QueueType = Field("classic", description="classic: one queue with priorities; "
                                  "quorum: replicated quorum queues, user work on <prefix>.user")

    # RabbitMQ behaviour.
    delivery_limit: int = Field(DEFAULT_DELIVERY_LIMIT, ge=1, description="quorum mode: "
                                "deliveries of a message before it is dead-lettered")
    confirm_timeout_s: float = Field(10.0, gt=0, description="Longest wait for one publisher "
                                     "confirm; then the publish is tried on a fresh connection")
    publish_attempts: int = Field(5, ge=1, description="Publishes of one message (each on a "
                                  "fresh connection to the next node) before giving up")

    # Database behaviour.
    lock_timeout_ms: int = Field(5000, ge=1, description="Counter/invoice lock wait limit")
    db_pool_size: int = Field(10, ge=1)

    # Integrator access.
    integrator_adapter: str = "gapless.integrator.http:HttpIntegrator"
    integrator_timeout_s: float = Field(10.0, gt=0)
    breaker_fail_max: int = Field(5, ge=1)
    breaker_reset_timeout_s: float = Field(10.0, gt=0)
    integrator_max_connections: int = Field(128, ge=1, description="HTTP connection pool size")
    retry_attempts: int = Field(3, ge=1, description="Integrator attempts per call (transient)")
    retry_max_s: float = Field(10.0, gt=0, description="No new attempt starts after this long")
    retry_wait_s: float = Field(0.5, gt=0, description="Base of the jittered exponential wait")
    recipient_ttl_s: float = Field(3600.0, gt=0, description="How long an answer of the "
                                   "integrator's recipient check (e-Fatura user? aliases?) is "
                                   "reused, by every worker")
    # GİB's verdict after acceptance, followed by recovery (gapless.ledger.verdicts.GibPolicy).
    gib_poll_first_s: float = Field(60.0, gt=0, description="First question about GİB's "
                                    "verdict this long after acceptance; then as long again as "
                                    "the document's age (exponential)")
    gib_poll_max_efatura_s: float = Field(3600.0, gt=0, description="Longest wait between "
                                          "questions about an e-Fatura")
    gib_poll_max_earsiv_s: float = Field(21600.0, gt=0, description="Longest wait between "
                                         "questions about an e-Arşiv (GİB's nightly report)")
    gib_poll_give_up_s: float = Field(604800.0, gt=0, description="A document still pending "
                                      "this long after acceptance is given up (stays pending)")
    gib_poll_batch: int = Field(100, ge=1, description="Questions claimed per recovery round")
    # The receiver's answer, learnt by the same questions (gapless.ledger.verdicts.GibPolicy).
    answer_window_despatch_s: float = Field(604800.0, gt=0, description="A dispatch note not "
                                            "answered this long after acceptance is recorded "
                                            "unanswered (GİB's 7 days)")
    answer_window_invoice_s: float = Field(691200.0, gt=0, description="A TICARIFATURA invoice "
                                           "not answered this long after acceptance is "
                                           "recorded unanswered (GİB's 8 days)")
    answer_poll_max_s: float = Field(3600.0, gt=0, description="Longest wait between questions "
                                     "while a document awaits its receiver's answer")
    nilvera_url: str = "https://apitest.nilvera.com"
    nilvera_api_key: str = Field("", repr=False)
    integrators_file: str = Field("", description="A TOML file of per-tenant integrator "
                                  "accounts (gapless.integrator.accounts); a tenant it does not "
                                  "name uses the settings above")

    # Worker.
    lease_s: float = Field(300.0, gt=0, description="A SENDING lease older than this is stale "
                           "and may be taken over (by redelivery or recovery)")
    group_linger_ms: float = Field(
        1.0, ge=0, le=100, description="A worker's group seal and ISSUED group commit: a "
        "statement about to start with fewer than 4 invoices waiting waits this long at most "
        "for more (0: never waits); more invoices per statement, and less CPU per invoice")
    issue_date_window_days: int = Field(
        7, ge=0, le=366, description="A producer's issue_date older than this many days (or in "
        "the future) is dead-lettered before a number is sealed; 7 is the e-Arşiv limit")

    # The chain's signed checkpoints (docs/chain.md): where `gapless chain checkpoint` writes
    # them, and where `verify` and `export` find them, unless --out / --checkpoints says.
    chain_checkpoints: str = Field("", description="Directory of the chain's checkpoints")

    # Logging.
    log_format: Literal["console", "json"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    # HTTP API.
    api_token: str = Field("", repr=False)
    # No GAPLESS_API_TOKEN: the API refuses to start unless this is set (`--insecure-no-auth`).
    api_insecure_no_auth: bool = False
    api_health_timeout_s: float = Field(2.0, gt=0, description="Per-check limit of /healthz")
    # Links in answers (Location, status_url, next, poll_more): built from this base when set,
    # else from a trusted Host header, else from the address the connection came in on.
    api_public_url: str = Field("", description="Base of every link the API answers with, "
                                "e.g. https://gapless.example or https://example.com/gapless")
    api_trusted_hosts: str = Field("", description="Comma-separated host names (besides the "
                                   "loopback ones) whose Host header links may be built from")
    # What one API process accepts from its clients (gapless.api.server).
    api_max_header_bytes: int = Field(16384, ge=1024, description="Request line and headers "
                                      "over this many bytes: 431, connection closed")
    api_max_headers: int = Field(100, ge=1, description="More header fields than this: 431")
    api_request_timeout_s: float = Field(10.0, gt=0, description="A request's head and body "
                                         "must arrive within this; else the connection closes")
    api_limit_concurrency: int = Field(512, ge=1, description="With this many connections "
                                       "open or requests running, a request is answered 503")
    api_max_connections: int = Field(1024, ge=1, description="A connection beyond this many "
                                     "open ones is closed at once")

    # Prometheus metrics of `gapless worker` and `gapless recovery` (--metrics-port).
    metrics_host: str = Field("127.0.0.1", description="Interface the metrics listen on")

    @field_validator("cluster_id")
    @classmethod
    def _cluster_in_range(cls, value: int) -> int:
        if not 0 <= value <= MAX_CLUSTER_ID:
            raise ValueError(f"cluster id must be between 0 and {MAX_CLUSTER_ID}, got {value}")
        return value

    @field_validator("amqp_url")
    @classmethod
    def _amqp_nodes(cls, value: str) -> str:
        from gapless.urls import node_urls

        node_urls(value)  # ValueError names the URL that is not an AMQP one
        return value

    @field_validator("api_public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        """An http(s) URL with a host and at most a path prefix; kept without a trailing '/'."""
        if not value:
            return value
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 - a ValueError names a port that is not one
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.query
                or parts.fragment or parts.username is not None):
            raise ValueError("public URL must be http(s)://host[:port][/prefix], without "
                             "user, query or fragment")
        return value.rstrip("/")

    @field_validator("queue")
    @classmethod
    def _queue_name(cls, value: str) -> str:
        if not value or len(value) > 200 or value.startswith("amq."):
            raise ValueError("queue prefix must be 1..200 characters and not start with 'amq.'")
        return value

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given fields replaced; ``None`` values (flags not given) are ignored."""
        given = {key: value for key, value in overrides.items() if value is not None}
        if not given:
            return self
        return type(self).model_validate({**self.model_dump(), **given})


def load_settings(**overrides: Any) -> Settings:
    """Read the environment, then apply CLI overrides."""
    return Settings().with_overrides(**overrides)


def process_environment(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a child ``gapless`` process that uses the same database, broker, queue
    and cluster id: this process's environment without its own ``GAPLESS_*`` variables, the
    settings as ``GAPLESS_*`` variables (JSON logs), then ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    env.update({
        "GAPLESS_DATABASE_URL": settings.database_url,
        "GAPLESS_AMQP_URL": settings.amqp_url,
        "GAPLESS_QUEUE": settings.queue,
        "GAPLESS_QUEUE_TYPE": settings.queue_type,
        "GAPLESS_CLUSTER_ID": str(settings.cluster_id),
        "GAPLESS_LOG_FORMAT": "json",
    })
    env.update(extra)
    return env


#: ``GAPLESS_*`` variables read outside :class:`Settings`, by gapless itself and by the
#: repository's own tools (the test suite's and benchmarks' knobs): known, so never reported.
OTHER_VARIABLES = frozenset({
    "GAPLESS_SCHEMA_DIR",                # gapless.ledger.migrations: where the migrations are
    "GAPLESS_WORKER_HOOKS",              # gapless.worker.hooks: the flow's step hooks (tests)
    "GAPLESS_FAULT_KILL_AT",             # tests/faults.py: the worker's fault injection
    "GAPLESS_FAULT_PAUSE_AT",
    "GAPLESS_FAULT_DURING_CALL_MS",
    "GAPLESS_CHAOS_DURATION",            # tests/chaos: `make chaos`
    "GAPLESS_CHAOS_INVOICES",
    "GAPLESS_CHAOS_WORKERS",
    "GAPLESS_CHAOS_SEED",
    "GAPLESS_CHAOS_FAULTS",
    "GAPLESS_HOSTILE_EXAMPLES",          # tests/hostile: more generated examples
    "GAPLESS_HOSTILE_RANDOM",
    "GAPLESS_RESTART_OUTAGE_S",          # tests/acceptance: longer service outages
    "GAPLESS_REQUIRE_PRIVATE_SERVICES",  # tests/ha, bench: private servers must start
    "GAPLESS_TEST_PG_BIN",               # where initdb and pg_ctl are
    "GAPLESS_TEST_RABBITMQ_SBIN",        # where rabbitmq-server is
    "GAPLESS_TEST_EXEC",                 # tests/forked.py: run commands with exec, not forked
})

#: How alike a misspelt name must be to a known one (difflib's ratio, prefix left out) to be
#: suggested.
_SUGGESTION_CUTOFF = 0.75


@dataclass(frozen=True)
class UnknownVariable:
    """A ``GAPLESS_*`` environment variable nothing reads, and the known one it most resembles."""

    name: str
    suggestion: str | None

    def line(self) -> str:
        """What an operator is told (the name only, never the value: it may be a secret)."""
        hint = f" (did you mean {self.suggestion}?)" if self.suggestion else ""
        return f"unknown setting {self.name}{hint}"


def known_variables() -> frozenset[str]:
    """Every ``GAPLESS_*`` variable gapless or its tools read: one per :class:`Settings` field
    (derived from the model, so a new field is known at once), and :data:`OTHER_VARIABLES`."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = set(OTHER_VARIABLES)
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names.add(alias.upper() if isinstance(alias, str) else f"{prefix}{field_name}".upper())
    return frozenset(names)


def unknown_variables(environ: Mapping[str, str] | None = None, *,
                      also_known: Iterable[str] = ()) -> list[UnknownVariable]:
    """The ``GAPLESS_*`` variables of ``environ`` (default: this process's environment) that
    nothing reads — a misspelt setting is otherwise silently ignored — sorted by name, each with
    the closest known name when one is close. ``also_known``: more names that are read (e.g.
    variables a configuration file names). Names are compared case-insensitively, as
    :class:`Settings` reads them."""
    environ = os.environ if environ is None else environ
    prefix = "GAPLESS_"
    known = known_variables() | {name.upper() for name in also_known}
    stems = {name.removeprefix(prefix): name for name in known}
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(prefix) or upper in known:
            continue
        close = difflib.get_close_matches(upper.removeprefix(prefix), stems, n=1,
                                          cutoff=_SUGGESTION_CUTOFF)
        found.append(UnknownVariable(name, stems[close[0]] if close else None))
    return found
