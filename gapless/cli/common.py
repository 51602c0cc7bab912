"""Helpers shared by the command modules."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer

from gapless.logging import configure_logging
from gapless.settings import Settings, load_settings

T = TypeVar("T")

DatabaseUrlOption = typer.Option(None, "--database-url", help="Overrides GAPLESS_DATABASE_URL.")
AmqpUrlOption = typer.Option(None, "--amqp-url", help="Overrides GAPLESS_AMQP_URL.")
QueueOption = typer.Option(None, "--queue", help="Overrides GAPLESS_QUEUE (queue name prefix).")
IntegratorUrlOption = typer.Option(None, "--integrator-url",
                                   help="Overrides GAPLESS_INTEGRATOR_URL.")
ClusterIdOption = typer.Option(None, "--cluster-id", help="Overrides GAPLESS_CLUSTER_ID.")


def settings_from(**overrides: Any) -> Settings:
    """Environment + flags; an invalid value is a usage error (exit 2)."""
    from pydantic import ValidationError

    try:
        settings = load_settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "setting"
        raise typer.BadParameter(f"{field}: {first['msg']}") from None
    configure_logging(settings.log_format, settings.log_level)
    return settings


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)
