"""``gapless publish --file F.jsonl | --demo N``: put invoices on the queue, with confirms.

Messages are validated before publishing (an invalid line is counted as refused, with its line
number and reason, and never sent). Confirms are pipelined: up to ``--in-flight`` messages
await their confirm at once on one channel. Exit 0 when every message was confirmed, 1 when any
was refused, 2 on bad usage.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import IO, Any

import typer

from gapless.cli.common import AmqpUrlOption, QueueOption, run, settings_from
from gapless.constants import PRIORITIES
from gapless.settings import Settings

MAX_REFUSALS_SHOWN = 100
REJECTED_TAX_ID = "0000000000"  # the mock integrator always rejects this customer (contract)

_PRODUCTS = (
    ("Widget", "10.00"), ("Gadget, blue", "24.90"), ("Consulting hour", "850.00"),
    ("Shipping", "45.50"), ("Cable 2 m", "3.75"), ("Annual licence", "12000.00"),
    ("Paper A4, 500 sheets", "119.99"), ("Repair service", "1500"), ("Screws M4 x 100", "0.35"),
)
_CUSTOMERS = ("Example Ltd", "Anadolu Gıda A.Ş.", "Bosphorus Logistics", "Kuzey Yazılım",
              "Ege Tekstil San. Tic.", "Acme Trading")
_VAT_RATES = ("20", "10", "1", "0")


@dataclass
class Summary:
    published: int = 0
    confirmed: int = 0
    refused: int = 0
    refusals: list[dict[str, Any]] = field(default_factory=list)

    def refuse(self, where: str, reason: str) -> None:
        self.refused += 1
        if len(self.refusals) < MAX_REFUSALS_SHOWN:
            self.refusals.append({"at": where, "reason": reason})

    def line(self) -> str:
        return f"published {self.published}, confirmed {self.confirmed}, refused {self.refused}"


def demo_messages(count: int, *, tenant: str, series: str, priority: str,
                  reject_every: int | None = None, seed: int | None = None,
                  run_id: str | None = None) -> Iterator[dict[str, Any]]:
    """``count`` valid, realistic messages with unique invoice ids ``demo-<run>-<n>``.

    Every ``reject_every``-th message carries the tax id the mock integrator always rejects;
    otherwise tax ids never start with 0 (so never ``0000000000``).
    """
    rng = random.Random(seed)
    run_id = run_id or uuid.uuid4().hex[:8]
    today = date.today().isoformat()
    for n in range(1, count + 1):
        if reject_every and n % reject_every == 0:
            tax_id = REJECTED_TAX_ID
        else:
            tax_id = str(rng.randint(1, 9)) + "".join(
                str(rng.randint(0, 9)) for _ in range(rng.choice((9, 10))))
        lines = []
        for _ in range(rng.randint(1, 5)):
            description, unit_price = rng.choice(_PRODUCTS)
            lines.append({"description": description, "quantity": str(rng.randint(1, 20)),
                          "unit_price": unit_price, "vat_rate": rng.choice(_VAT_RATES)})
        yield {"invoice_id": f"demo-{run_id}-{n}", "tenant": tenant, "series": series,
               "priority": priority, "issue_date": today, "currency": "TRY",
               "customer": {"tax_id": tax_id, "name": rng.choice(_CUSTOMERS)}, "lines": lines}


def _open_file(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        return Path(path).open("rb")
    except OSError as exc:
        raise typer.BadParameter(f"--file: cannot read {path}: {exc.strerror}") from None


def _file_lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """Non-blank lines with their 1-based line numbers."""
    for number, raw in enumerate(stream, start=1):
        if raw.strip():
            yield number, raw.rstrip(b"\r\n")


def _count_lines(stream: IO[bytes]) -> int | None:
    """Non-blank lines of a regular file (then rewound); None for a pipe."""
    if not stream.seekable():
        return None
    total = sum(1 for raw in stream if raw.strip())
    stream.seek(0)
    return total


async def publish_all(settings: Settings, items: Iterator[tuple[str, Any]], *,
                      total: int | None, priority: str | None, rate: float | None,
                      in_flight: int, show_progress: bool) -> Summary:
    """Validate and publish ``items`` (``(where, dict | bytes)``) with pipelined confirms.

    Bytes are parsed as a message first; invalid ones are refused without publishing.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from gapless.message import InvalidMessage, parse_message, validate_message
    from gapless.publisher import Publisher, PublishRefused, PublishUnconfirmed

    summary = Summary()
    slots = asyncio.Semaphore(in_flight)
    pending: set[asyncio.Task[None]] = set()
    console = Console(stderr=True)
    progress = Progress(TextColumn("publishing"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("refused {task.fields[refused]}"), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console,
                        disable=not (show_progress and console.is_terminal))
    bar = progress.add_task("publish", total=total, refused=0)

    async def send(publisher: Publisher, where: str, message: Any) -> None:
        try:
            await publisher.publish(message, priority=priority)
        except (PublishRefused, PublishUnconfirmed) as exc:
            summary.refuse(where, str(exc))
        else:
            summary.confirmed += 1
        finally:
            slots.release()
            progress.update(bar, advance=1, refused=summary.refused)

    started = time.monotonic()
    with progress:
        async with Publisher(settings) as publisher:
            for index, (where, item) in enumerate(items):
                try:
                    message = (parse_message(item, "application/json")
                               if isinstance(item, bytes) else validate_message(item))
                except InvalidMessage as exc:
                    summary.refuse(where, exc.reason)
                    progress.update(bar, advance=1, refused=summary.refused)
                    continue
                if rate:
                    # Pacing, not synchronisation: hold the schedule of `rate` messages a second.
                    delay = started + index / rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await slots.acquire()
                summary.published += 1
                task = asyncio.create_task(send(publisher, where, message))
                pending.add(task)
                task.add_done_callback(pending.discard)
            if pending:
                await asyncio.gather(*pending)
    return summary


def publish(
    file: str | None = typer.Option(None, "--file", help="JSON Lines file of messages ('-': "
                                    "stdin); invalid lines are refused, not published."),
    demo: int | None = typer.Option(None, "--demo", help="Generate N valid demo invoices."),
    tenant: str = typer.Option("acme", "--tenant", help="Tenant of --demo invoices."),
    series: str = typer.Option("ABC", "--series", help="Series of --demo invoices."),
    priority: str | None = typer.Option(
        None, "--priority",
        help="user | batch. --demo default: batch; --file default: each message's own."),
    rate: float | None = typer.Option(None, "--rate", help="At most R messages per second."),
    reject_every: int | None = typer.Option(
        None, "--reject-every",
        help=f"--demo: every K-th invoice gets tax id {REJECTED_TAX_ID}, which the mock "
             "integrator rejects."),
    in_flight: int = typer.Option(256, "--in-flight", help="Confirms awaited at once."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="Progress bar on stderr (only on a terminal)."),
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Publish invoices (persistent, with publisher confirms); print a one-line summary."""
    from gapless.message import InvalidMessage, validate_message

    if (file is None) == (demo is None):
        raise typer.BadParameter("give exactly one of --file F.jsonl or --demo N")
    if demo is not None and demo < 1:
        raise typer.BadParameter(f"--demo: N must be at least 1, got {demo}")
    if priority is not None and priority not in PRIORITIES:
        raise typer.BadParameter(f"--priority: choose user or batch, got {priority!r}")
    if rate is not None and rate <= 0:
        raise typer.BadParameter(f"--rate: must be greater than 0, got {rate}")
    if reject_every is not None and (reject_every < 1 or demo is None):
        raise typer.BadParameter("--reject-every: needs --demo and K of at least 1")
    if in_flight < 1:
        raise typer.BadParameter(f"--in-flight: must be at least 1, got {in_flight}")
    settings = settings_from(amqp_url=amqp_url, queue=queue)

    items: Iterator[tuple[str, Any]]
    stream: IO[bytes] | None = None
    if demo is not None:
        demo_priority = priority or "batch"
        try:  # a bad --tenant/--series is a usage error, not N refusals
            validate_message(next(demo_messages(1, tenant=tenant, series=series,
                                                priority=demo_priority)))
        except InvalidMessage as exc:
            raise typer.BadParameter(exc.reason) from None
        total: int | None = demo
        items = ((f"demo {n}", message) for n, message in enumerate(
            demo_messages(demo, tenant=tenant, series=series, priority=demo_priority,
                          reject_every=reject_every), start=1))
    else:
        assert file is not None
        stream = _open_file(file)
        total = _count_lines(stream)
        items = ((f"line {number}", raw) for number, raw in _file_lines(stream))

    try:
        summary = run(publish_all(settings, items, total=total, priority=priority, rate=rate,
                                  in_flight=in_flight, show_progress=progress))
    finally:
        if stream is not None and stream is not sys.stdin.buffer:
            stream.close()
    if as_json:
        typer.echo(json.dumps({"published": summary.published, "confirmed": summary.confirmed,
                               "refused": summary.refused, "refusals": summary.refusals}))
    else:
        for refusal in summary.refusals:
            typer.echo(f"refused {refusal['at']}: {refusal['reason']}", err=True)
        if summary.refused > len(summary.refusals):
            typer.echo(f"... and {summary.refused - len(summary.refusals)} more refusals",
                       err=True)
        typer.echo(summary.line())
    if summary.refused:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("publish")(publish)
