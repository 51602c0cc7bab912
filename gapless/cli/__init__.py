"""The ``gapless`` command line: one console script, one sub-command per process or task.

Usage errors print one line and exit 2; gapless errors print one line and exit 1.
"""

from __future__ import annotations

import importlib
import signal
import sys

import typer

from gapless.errors import GaplessError


def _stop_before_start(signum: int, frame: object) -> None:
    """SIGTERM while a command is still starting (imports, connecting): nothing has been done
    yet, so stopping is clean — exit 0. Long-running commands install their own graceful
    handler (drain, then exit 0) as soon as their event loop runs."""
    raise SystemExit(0)


if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _stop_before_start)

app = typer.Typer(
    name="gapless",
    help="Unique, gap-free legal document numbers, issued from queues.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# typer may vendor its own click; take the exception classes from typer's own hierarchy.
UsageError: type[Exception] = next(
    cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError")

#: Command modules; each has ``register(app)``.
COMMAND_MODULES = (
    "gapless.cli.core",
    "gapless.cli.mock",
    "gapless.cli.publish",
    "gapless.cli.worker",
    "gapless.cli.api",
    "gapless.cli.recovery",
    "gapless.cli.invoice",
    "gapless.cli.audit",
    "gapless.cli.status",
    "gapless.cli.dead",
    "gapless.cli.demo",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register()


def fail_usage(message: str) -> None:
    """Print a one-line usage error and exit 2 (bad flag or argument)."""
    print(f"gapless: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _unreachable(exc: BaseException) -> str | None:
    """A one-line message for a service that cannot be reached, or None for other errors."""
    from sqlalchemy.exc import OperationalError

    if isinstance(exc, OperationalError):
        first = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        return f"cannot reach the database: {first}"
    module = type(exc).__module__
    if module.startswith(("aiormq", "aio_pika")) or isinstance(exc, ConnectionError):
        return f"cannot reach the broker: {exc}".splitlines()[0]
    if isinstance(exc, OSError):
        return f"{exc}".splitlines()[0]
    return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="gapless", standalone_mode=False)
    except UsageError as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":
            raise SystemExit(2) from None  # typer has printed the help already
        where = f" ({ctx.command_path})" if ctx is not None else ""
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"gapless: error{where}: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        print("gapless: aborted", file=sys.stderr)
        raise SystemExit(130) from None
    except GaplessError as exc:
        print(f"gapless: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as exc:
        reason = _unreachable(exc)
        if reason is None:
            raise
        print(f"gapless: {reason}", file=sys.stderr)
        raise SystemExit(1) from None
    if isinstance(result, int):
        raise SystemExit(result)
