"""``gapless doctor [--json]``: can gapless work here, as configured? One line per check.

The checks are :mod:`gapless.ops.doctor`'s; this module prints them — ``ok``, ``WARN`` or
``FAIL`` with a hint, ``skip`` — or one JSON document, and exits 1 when any check fails, 0
otherwise (warnings included).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import typer

from gapless.cli.options import (
    AmqpUrlOption,
    ClusterIdOption,
    DatabaseUrlOption,
    IntegratorUrlOption,
    installed_version,
    run,
    settings_from,
)
from gapless.cli.printable import echo, echo_json, printable
from gapless.ops.doctor import DEFAULT_TIMEOUT_S, FAIL, OK, SKIP, WARN, Check, diagnose, healthy

LABELS = {OK: "ok", WARN: "WARN", FAIL: "FAIL", SKIP: "skip"}


def check_line(check: Check) -> str:
    """``label name detail[; hint: …]``, the columns aligned; what a service said of itself
    (its version, its error) is made printable."""
    text = f"{LABELS[check.status]:<5} {check.name:<11} {printable(check.detail)}"
    return f"{text}; hint: {printable(check.hint)}" if check.hint else text


def doctor(
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--timeout", min=0.1,
                                  help="Seconds each check may take."),
    database_url: str | None = DatabaseUrlOption,
    amqp_url: str | None = AmqpUrlOption,
    integrator_url: str | None = IntegratorUrlOption,
    cluster_id: int | None = ClusterIdOption,
) -> None:
    """Check PostgreSQL, RabbitMQ, the integrator, the schema version, the cluster id and
    replication; one line each (ok / WARN / FAIL with a hint); exit 1 when any fails."""
    settings = settings_from(database_url=database_url, amqp_url=amqp_url,
                             integrator_url=integrator_url, cluster_id=cluster_id)
    started = time.monotonic()
    checks = run(diagnose(settings, timeout_s=timeout))
    ok = healthy(checks)
    if as_json:
        document: dict[str, Any] = {
            "ok": ok, "version": installed_version(),
            "seconds": round(time.monotonic() - started, 3),
            "checks": [asdict(check) for check in checks]}
        echo_json(document)
    else:
        for check in checks:
            echo(check_line(check))
    if not ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
