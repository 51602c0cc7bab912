"""The ``gapless`` command line: one console script, one sub-command per process or task.

Usage errors print one line and exit 2; gapless errors print one line and exit 1. So does a
service that cannot be reached — PostgreSQL, RabbitMQ, the integrator — whatever the command:
:func:`main` recognises the drivers' connection errors (see
:func:`gapless.ops.unreachable.describe_unreachable`) and prints the service, its URL without the
password, and what to check, with no traceback. An error's message may hold data (an id, what
a server said): it is printed as text (:func:`gapless.cli.printable.echo`), like every value.

Every command first names the ``GAPLESS_*`` environment variables nothing reads, with the
closest known name (:func:`gapless.settings.unknown_variables`), and goes on. Shell completion
is typer's: ``gapless --install-completion`` / ``--show-completion``.
"""

from __future__ import annotations

import importlib
import re
import signal

import typer

from gapless.cli.printable import echo
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
    add_completion=True,
    pretty_exceptions_enable=False,
)



def _print_version(value: bool) -> None:
    if value:
        from gapless.cli.options import installed_version

        echo(f"gapless {installed_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the installed version and exit."),
) -> None:
    """Unique, gap-free legal document numbers, issued from queues."""
    _warn_unknown_settings()


def _warn_unknown_settings() -> None:
    """Name every ``GAPLESS_*`` variable nothing reads (a misspelt setting would otherwise be
    ignored in silence), with the closest known name: one line each on stderr, or — when the
    process logs JSON — one ``unknown_setting`` warning event each. Never the value."""
    from gapless.settings import unknown_variables

    unknown = unknown_variables()
    if not unknown:
        return
    from gapless.cli.options import invocation_settings

    settings = invocation_settings()
    if settings is not None and settings.integrators_file:
        # A per-tenant key may be named GAPLESS_…: what the accounts file names is read too.
        from gapless.integrator.accounts import secret_variables

        unknown = unknown_variables(also_known=secret_variables(settings.integrators_file))
        if not unknown:
            return
    if settings is not None and settings.log_format == "json":
        import structlog

        from gapless.logging import configure_logging

        configure_logging(settings.log_format, settings.log_level)
        log = structlog.get_logger("gapless.settings")
        for variable in unknown:
            log.warning("unknown_setting", variable=variable.name,
                        did_you_mean=variable.suggestion)
        return
    for variable in unknown:
        echo(f"gapless: {variable.line()}", err=True)


# typer may vendor its own click; take the exception classes from typer's own hierarchy.
UsageError: type[Exception] = next(
    cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError")

#: Command modules; each has ``register(app)``.
COMMAND_MODULES = (
    "gapless.cli.migrate",
    "gapless.cli.series",
    "gapless.cli.ids",
    "gapless.cli.tenant",
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
    "gapless.cli.doctor",
    "gapless.cli.chain",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register()


def _first_line(message: str) -> str:
    """The first line of an error's message (a driver's may go on with details); any other
    line break in it is data, which :func:`gapless.cli.printable.echo` shows escaped."""
    return re.split(r"\r\n|\r|\n", message, maxsplit=1)[0]


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
        echo(f"gapless: error{where}: {_first_line(message)}", err=True)
        raise SystemExit(2) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        echo("gapless: aborted", err=True)
        raise SystemExit(130) from None
    except Exception as exc:
        from gapless.cli.options import invocation_settings
        from gapless.ops.unreachable import describe_unreachable

        # Before GaplessError: a gapless error raised from a connection error (the broker
        # unavailable, the ledger unreadable) is reported as the service it is about.
        failure = describe_unreachable(exc, invocation_settings())
        if failure is not None:
            message = failure.line()
        elif isinstance(exc, GaplessError | OSError):  # OSError: e.g. a port already in use
            message = str(exc)
        else:
            raise
        echo(f"gapless: {_first_line(message)}", err=True)
        raise SystemExit(1) from None
    if isinstance(result, int):
        raise SystemExit(result)
