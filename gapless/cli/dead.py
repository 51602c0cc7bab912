"""``gapless dead list | replay``: inspect ``<prefix>.dead`` and put fixed messages back.

The work is :mod:`gapless.ops.dead`'s (no message is lost whatever happens to this process; a
replayed message's dead copy goes only after the broker confirmed the new one); this module
parses the options, reads the file of fixes, and prints what was found or done. ``replay`` exits
1 when an invoice_id asked for is not in the dead queue.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from gapless.cli.options import AmqpUrlOption, QueueOption, run, settings_from
from gapless.cli.printable import console, echo, echo_json
from gapless.constants import dead_queue_name
from gapless.ops.dead import (
    DeadLetter,
    DeadLetters,
    FixKey,
    InvalidFix,
    list_dead,
    parse_fixes,
    replay_dead,
)

dead_app = typer.Typer(help="Inspect the dead-letter queue and replay fixed messages.",
                       no_args_is_help=True)


def load_fixes(path: Path) -> dict[FixKey, tuple[bytes, str | None]]:
    """The fixes of ``--file`` (:func:`gapless.ops.dead.parse_fixes`); a file that cannot be
    read or a bad line is a usage error, and nothing is replayed."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise typer.BadParameter(f"--file: cannot read {path}: {exc.strerror}") from None
    try:
        return parse_fixes(data)
    except InvalidFix as exc:
        raise typer.BadParameter(f"--file line {exc.line}: {exc.reason}") from None


def _reason(letter: DeadLetter) -> str:
    """Why it died, and — when it is something else — why its body cannot be read."""
    reason = letter.reason or "-"
    if letter.body_problem and letter.body_problem not in reason:
        reason += f"; {letter.body_problem}"
    return reason


def letters_table(dead: DeadLetters) -> Any:
    """The dead letters read, one row each: position, invoice_id, when, why (shown by
    :func:`gapless.cli.printable.console` as text, never markup: they come from the
    messages)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                  title=f"{dead.queue}: showing {len(dead.messages)} of {dead.total}")
    table.add_column("#", justify="right")
    table.add_column("invoice_id", overflow="fold", max_width=24)
    table.add_column("dead at (UTC)", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for letter in dead.messages:
        dead_at = (letter.dead_at or "-")[:19].replace("T", " ")
        unnamed = "(unreadable body)" if letter.body_problem else "(no invoice_id)"
        table.add_row(str(letter.position), letter.invoice_id or unnamed, dead_at,
                      _reason(letter))
    return table


@dead_app.command("list")
def dead_list(
    limit: int = typer.Option(20, "--limit", min=1, max=10000,
                              help="Show at most N messages (from the head of the queue)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Show dead messages (reason, invoice_id, when) without removing any."""
    settings = settings_from(amqp_url=amqp_url, queue=queue)
    dead = run(list_dead(settings, limit))
    if as_json:
        echo_json(asdict(dead))
        return
    if not dead.messages:
        echo(f"{dead.queue}: no dead letters")
        return
    console().print(letters_table(dead))


@dead_app.command("replay")
def dead_replay(
    replay_all: bool = typer.Option(False, "--all", help="Replay every dead message."),
    invoice_ids: list[str] = typer.Option(
        [], "--invoice-id", help="Replay the message of this invoice_id (repeatable)."),
    file: Path | None = typer.Option(
        None, "--file",
        help="JSON Lines of fixed messages: each replaces the dead body with its invoice_id "
             "(and selects it when neither --all nor --invoice-id is given)."),
    tenant: str | None = typer.Option(
        None, "--tenant", help="Only this tenant's messages (invoice ids are unique per "
                               "tenant: two tenants may each have a dead message of one id)."),
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Put dead messages back on the main queue (confirmed before the dead copy is removed)."""
    if replay_all and invoice_ids:
        raise typer.BadParameter("give either --all or --invoice-id, not both")
    fixes = load_fixes(file) if file is not None else {}
    if not (replay_all or invoice_ids or fixes):
        raise typer.BadParameter("choose what to replay: --all, --invoice-id ID, or --file F")
    settings = settings_from(amqp_url=amqp_url, queue=queue)
    result = run(replay_dead(settings, replay_all=replay_all, invoice_ids=set(invoice_ids),
                             fixes=fixes, tenant=tenant))
    for invoice_id, owner, problem in zip(result.replayed, result.tenants, result.problems,
                                          strict=True):
        if invoice_id is not None:
            suffix = " (fixed body)" if (owner, invoice_id) in result.fixed else ""
            echo(f"replayed {invoice_id}{suffix}")
        else:
            echo(f"replayed a message without an invoice_id ({problem or 'none in its body'})")
    for invoice_id in result.not_found:
        echo(f"not in {dead_queue_name(settings.queue)}: {invoice_id}", err=True)
    for invoice_id in result.unused_fixes(fixes):
        echo(f"fix for {invoice_id} not used (its message was not selected)", err=True)
    echo(f"replayed {len(result.replayed)} to {settings.queue}, {len(result.fixed)} with "
         f"a fixed body; {result.kept} left in {dead_queue_name(settings.queue)}")
    if result.not_found:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(dead_app, name="dead")
