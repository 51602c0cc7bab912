"""What every command is invoked with: the shared options (``--database-url``, ``--amqp-url``…),
the settings they make with the environment (:func:`settings_from`, remembered for the process so
that an unreachable service is reported with the URL the command used), the event loop a command
runs on, and the installed version (``--version``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from dataclasses import dataclass
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


@dataclass
class _Invocation:
    """What this process's command was configured with (one command per process)."""

    settings: Settings | None = None


_INVOCATION = _Invocation()


def settings_from(**overrides: Any) -> Settings:
    """Environment + flags; an invalid value is a usage error (exit 2).

    The result is also remembered for the process, so that an unreachable service can be
    reported with the URL the command really used (:func:`invocation_settings`).
    """
    from pydantic import ValidationError

    try:
        settings = load_settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "setting"
        raise typer.BadParameter(f"{field}: {first['msg']}") from None
    if settings.integrators_file:
        # Every process refuses a file it could not use, before it starts anything.
        from gapless.errors import ConfigurationError
        from gapless.integrator.accounts import load_accounts

        try:
            load_accounts(settings)
        except ConfigurationError as exc:
            raise typer.BadParameter(str(exc)) from None
    configure_logging(settings.log_format, settings.log_level)
    _INVOCATION.settings = settings
    return settings


def invocation_settings() -> Settings | None:
    """The settings of this command (flags included), else the environment's; None when the
    environment itself is invalid."""
    if _INVOCATION.settings is not None:
        return _INVOCATION.settings
    from pydantic import ValidationError

    try:
        return load_settings()
    except ValidationError:
        return None


#: New container objects between two collections of the youngest generation (Python: 700).
YOUNG_GENERATION = 50_000


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on uvloop where it is installed (a third of the event loop's
    CPU per callback), else on asyncio's own loop.

    What the process holds by now (its modules, classes, the API's routes and schemas) lives
    as long as it does, so it is frozen out of the garbage collector's reach
    (:func:`gc.freeze`): a full collection no longer walks those ~150,000 objects again and
    again (a fifth of a batch message's CPU in the API before).

    The youngest generation is collected every YOUNG_GENERATION new container objects rather
    than every 700: what a message allocates is nearly all freed by reference counting before a
    collection would look at it, and each collection walks what is young and alive then — a
    worker's instructions per UBL-TR invoice 3.70 → 3.62 M (``bench/instructions.py``). Cycles
    are still found by the same collector, a little later."""
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION, 10, 10)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def installed_version() -> str:
    """The version of the installed distribution (its metadata), as ``pip`` reports it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gapless")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        from gapless import __version__

        return f"{__version__} (not installed)"

