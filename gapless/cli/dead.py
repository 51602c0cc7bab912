"""``gapless dead list | replay``: inspect ``<prefix>.dead`` and put fixed messages back.

Both commands take dead messages with ``basic.get`` *without* auto-ack, so a message is never
lost whatever happens to this process: until it is acked it belongs to the broker, and a crash
or a closed connection returns it to the dead queue.

* ``list`` gets up to ``--limit`` messages, holds them unacked while reading their headers, and
  then rejects them with ``requeue`` — they stay in the dead queue, in their order.
* ``replay`` walks the dead queue the same way; every selected message is re-published to the
  main queue (persistent, publisher confirm, with its original priority), and only **after the
  confirm** is its dead copy acked. A crash between the two leaves the message in both queues:
  the worker maps a repeated ``invoice_id`` onto the same invoice, so the duplicate is harmless.
  Messages not selected are requeued untouched. A replayed message that is still invalid goes
  back to the dead queue with its reason the next time a worker sees it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

from gapless.cli.options import AmqpUrlOption, QueueOption, run, settings_from
from gapless.constants import (
    CONTENT_TYPE_JSON,
    HEADER_DEAD_AT,
    HEADER_DEAD_REASON,
    HEADER_DEAD_WORKER,
    HEADER_REPLAYED_AT,
    dead_queue_name,
)
from gapless.logging import get_logger
from gapless.settings import Settings

log = get_logger("gapless.dead")

dead_app = typer.Typer(help="Inspect the dead-letter queue and replay fixed messages.",
                       no_args_is_help=True)

#: Headers that describe a previous death; a replayed message starts without them.
_DEATH_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue",
                  "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue",
                  "x-last-death-reason", "x-delivery-count")


@dataclass(frozen=True)
class DeadLetter:
    """What an operator needs to decide about one dead message (never its payload)."""

    position: int
    invoice_id: str | None
    reason: str | None
    dead_at: str | None
    worker: str | None
    message_id: str | None
    priority: int | None
    content_type: str | None
    body_bytes: int


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def invoice_id_of(body: bytes) -> str | None:
    """The body's ``invoice_id`` when the body is a JSON object that has one.

    Not the ``message_id``: a publisher that gives none gets a random one from its client
    library, which would pass for an invoice_id here.
    """
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(data, dict) and isinstance(data.get("invoice_id"), str):
        return str(data["invoice_id"])
    return None


def _reason(headers: dict[str, Any]) -> str | None:
    """gapless's own reason header, else what RabbitMQ recorded when it dead-lettered it."""
    reason = _text(headers.get(HEADER_DEAD_REASON))
    if reason:
        return reason
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        why, queue = _text(deaths[0].get("reason")), _text(deaths[0].get("queue"))
        if why == "delivery_limit":
            return (f"broker: delivered too often without an outcome (delivery limit) "
                    f"in {queue}")
        return f"broker: {why} in {queue}"
    return None


def describe(position: int, message: Any) -> DeadLetter:
    headers = dict(message.headers or {})
    dead_at = _text(headers.get(HEADER_DEAD_AT))
    if dead_at is None and message.timestamp is not None:
        dead_at = message.timestamp.isoformat()
    return DeadLetter(
        position=position, invoice_id=invoice_id_of(message.body),
        reason=_reason(headers), dead_at=dead_at, worker=_text(headers.get(HEADER_DEAD_WORKER)),
        message_id=message.message_id, priority=message.priority,
        content_type=message.content_type, body_bytes=len(message.body))


async def _requeue(messages: list[Any]) -> None:
    """Give held messages back to the dead queue (a lost channel does the same by itself)."""
    import aiormq

    for message in messages:
        try:
            await message.nack(requeue=True)
        except (aiormq.exceptions.AMQPError, RuntimeError, ConnectionError):
            log.warning("dead_requeue_failed", message_id=message.message_id)


async def list_dead(settings: Settings, limit: int) -> tuple[int, list[DeadLetter]]:
    """(messages in the dead queue, the first ``limit`` of them); every one stays queued."""
    import aiormq

    from gapless.amqp.connection import connect_once

    connection = await connect_once(settings)
    held: list[Any] = []
    async with connection:
        channel = await connection.channel()
        try:
            queue = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return 0, []
        total = queue.declaration_result.message_count or 0
        try:
            while len(held) < limit:
                message = await queue.get(no_ack=False, fail=False)
                if message is None:
                    break
                held.append(message)
            return total, [describe(n, m) for n, m in enumerate(held, start=1)]
        finally:
            await _requeue(held)


@dataclass
class ReplayResult:
    replayed: list[str | None] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    kept: int = 0
    not_found: list[str] = field(default_factory=list)


def load_fixes(path: Path) -> dict[str, tuple[bytes, str | None]]:
    """Fixed bodies keyed by invoice_id: ``{id: (body, priority or None)}``.

    Each line must be a valid contract message (the point of a fix); a bad line is a usage
    error and nothing is replayed.
    """
    from gapless.message import InvalidMessage, parse_message

    fixes: dict[str, tuple[bytes, str | None]] = {}
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise typer.BadParameter(f"--file: cannot read {path}: {exc.strerror}") from None
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            message = parse_message(raw, CONTENT_TYPE_JSON)
        except InvalidMessage as exc:
            raise typer.BadParameter(f"--file line {number}: {exc.reason}") from None
        if message.invoice_id in fixes:
            raise typer.BadParameter(
                f"--file line {number}: invoice_id {message.invoice_id!r} appears twice")
        fixes[message.invoice_id] = (raw.strip(), message.priority)
    return fixes


async def replay_dead(settings: Settings, *, replay_all: bool, invoice_ids: set[str],
                      fixes: dict[str, tuple[bytes, str | None]]) -> ReplayResult:
    """Move the selected dead messages to the main queue: publish (confirmed), then ack.

    Selected: every message with ``replay_all``, else those whose invoice_id is in
    ``invoice_ids``. A message with a fix in ``fixes`` is published with the fixed body.
    """
    from gapless.amqp.connection import connect_once
    from gapless.amqp.publisher import Publisher

    result = ReplayResult()
    found: set[str] = set()
    held: list[Any] = []
    # Read on a connection of its own: the publisher may move to a fresh connection (another
    # node) when a confirm does not come, and the held dead copies must stay ackable.
    async with Publisher(settings) as publisher, await connect_once(settings) as reading:
        channel = await reading.channel()
        dead = await channel.declare_queue(dead_queue_name(settings.queue), passive=True)
        try:
            while True:
                message = await dead.get(no_ack=False, fail=False)
                if message is None:
                    break
                held.append(message)
                invoice_id = invoice_id_of(message.body)
                if not replay_all and invoice_id not in invoice_ids:
                    continue
                if invoice_id is not None:
                    found.add(invoice_id)
                await _republish(publisher, message, fixes.get(invoice_id or ""))
                held.remove(message)
                result.replayed.append(invoice_id)
                if invoice_id is not None and invoice_id in fixes:
                    result.fixed.append(invoice_id)
                log.info("dead_letter_replayed", queue=settings.queue, invoice_id=invoice_id,
                         fixed=invoice_id in fixes)
        finally:
            result.kept = len(held)
            await _requeue(held)
    if not replay_all:
        result.not_found = sorted(invoice_ids - found)
    return result


async def _republish(publisher: Any, message: Any, fix: tuple[bytes, str | None] | None) -> None:
    """Publish one dead message (its fixed body, if any) on the main queue, confirmed, then ack
    the dead copy. The gapless and dead-lettering headers go; a replay stamp is added."""
    from gapless.amqp.topology import amqp_priority

    body, priority = message.body, message.priority
    if fix is not None:
        body, fix_priority = fix
        if fix_priority is not None:
            priority = amqp_priority(fix_priority, None)
    headers = {key: value for key, value in (message.headers or {}).items()
               if not key.startswith("x-gapless-") and key not in _DEATH_HEADERS}
    headers[HEADER_REPLAYED_AT] = datetime.now(UTC).isoformat()
    await publisher.publish(body, priority=priority, headers=headers,
                            content_type=message.content_type or CONTENT_TYPE_JSON,
                            message_id=message.message_id)
    # The confirm is in: only now may the dead copy go.
    await message.ack()


# ---------------------------------------------------------------------------------- commands


@dead_app.command("list")
def dead_list(
    limit: int = typer.Option(20, "--limit", min=1, max=10000,
                              help="Show at most N messages (from the head of the queue)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Show dead messages (reason, invoice_id, when) without removing any."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    settings = settings_from(amqp_url=amqp_url, queue=queue)
    total, letters = run(list_dead(settings, limit))
    name = dead_queue_name(settings.queue)
    if as_json:
        typer.echo(json.dumps({"queue": name, "total": total,
                               "messages": [asdict(letter) for letter in letters]}))
        return
    console = Console()
    if not letters:
        console.print(f"{name}: no dead letters")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left",
                  title=f"{name}: showing {len(letters)} of {total}")
    table.add_column("#", justify="right")
    table.add_column("invoice_id", overflow="fold", max_width=24)
    table.add_column("dead at (UTC)", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for letter in letters:
        dead_at = (letter.dead_at or "-")[:19].replace("T", " ")
        table.add_row(str(letter.position), letter.invoice_id or "(unreadable body)", dead_at,
                      letter.reason or "-")
    console.print(table)


@dead_app.command("replay")
def dead_replay(
    replay_all: bool = typer.Option(False, "--all", help="Replay every dead message."),
    invoice_ids: list[str] = typer.Option(
        [], "--invoice-id", help="Replay the message of this invoice_id (repeatable)."),
    file: Path | None = typer.Option(
        None, "--file",
        help="JSON Lines of fixed messages: each replaces the dead body with its invoice_id "
             "(and selects it when neither --all nor --invoice-id is given)."),
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Put dead messages back on the main queue (confirmed before the dead copy is removed)."""
    if replay_all and invoice_ids:
        raise typer.BadParameter("give either --all or --invoice-id, not both")
    fixes = load_fixes(file) if file is not None else {}
    if not (replay_all or invoice_ids or fixes):
        raise typer.BadParameter("choose what to replay: --all, --invoice-id ID, or --file F")
    wanted = set(invoice_ids) if invoice_ids else set(fixes)
    settings = settings_from(amqp_url=amqp_url, queue=queue)
    result = run(replay_dead(settings, replay_all=replay_all, invoice_ids=wanted, fixes=fixes))
    for invoice_id in result.replayed:
        suffix = " (fixed body)" if invoice_id in result.fixed else ""
        typer.echo(f"replayed {invoice_id or '(no invoice_id)'}{suffix}")
    for invoice_id in result.not_found:
        typer.echo(f"not in {dead_queue_name(settings.queue)}: {invoice_id}", err=True)
    unused = sorted(set(fixes) - set(result.fixed) - set(result.not_found))
    for invoice_id in unused:
        typer.echo(f"fix for {invoice_id} not used (its message was not selected)", err=True)
    typer.echo(f"replayed {len(result.replayed)} to {settings.queue}, {len(result.fixed)} with "
               f"a fixed body; {result.kept} left in {dead_queue_name(settings.queue)}")
    if result.not_found:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(dead_app, name="dead")
