"""``gapless publish --file F.jsonl | --demo N``: put invoices on the queue, with confirms.

Messages are validated before publishing (an invalid line is counted as refused, with its line
number and reason, and never sent). A file that is not JSON Lines at all — a JSON array, or one
object pretty-printed over several lines — is recognised from its first lines and refused as a
whole, in one line (exit 2), before anything is published. Confirms are pipelined: messages go
out in chunks, and up to ``--in-flight`` await their confirm at once on one channel. Exit 0 when
every message was confirmed, 1 when any was refused, 2 on bad usage.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import typer

from gapless.cli.options import AmqpUrlOption, QueueOption, run, settings_from
from gapless.cli.printable import console, echo, echo_json
from gapless.constants import PRIORITIES
from gapless.demo.samples import REJECTED_TAX_ID, sample_messages
from gapless.settings import Settings

MAX_REFUSALS_SHOWN = 100

#: Confirms awaited at once by default: two chunks of 512 in flight. With 256 the command waited
#: for confirms between chunks (bench/publish.py, 2026-11-27: 9,100–9,900 messages/s after
#: start-up with 256, 10,200–10,500 with 1,024, interleaved); a larger window only means more
#: messages published again after a lost connection, which is safe (same invoice_id).
DEFAULT_IN_FLIGHT = 1024
#: Messages validated between two turns of the event loop.
YIELD_EVERY = 32


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


#: What a file that is not JSON Lines is told.
_JSONL_HINT = "give one JSON object per line (JSONL)"


def _not_jsonl(first: tuple[int, bytes], second: tuple[int, bytes] | None) -> str | None:
    """Why a file whose first non-blank lines are these is not JSON Lines (None: it may be).

    A line that opens an array is never a message; a first line that opens an object but is not
    JSON, followed by a line that does not open another object, is one object spread over
    several lines (pretty-printed). A first line that is merely broken JSON, followed by more
    objects, is left to be refused as a line like any other."""
    number, raw = first
    text = raw.removeprefix(b"\xef\xbb\xbf").strip()  # a UTF-8 byte order mark: not data
    if text.startswith(b"["):
        return f"line {number}: a JSON array; {_JSONL_HINT}"
    if not text.startswith(b"{"):
        return None
    try:
        json.loads(text)
    except ValueError:
        if second is None or not second[1].lstrip().startswith(b"{"):
            return f"line {number}: a JSON object over several lines; {_JSONL_HINT}"
    return None


def _jsonl_lines(stream: IO[bytes], name: str) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a JSON Lines stream; a usage error (exit 2) before the first is
    given when the stream is plainly not JSON Lines (:func:`_not_jsonl`). Reads at most two
    lines ahead, so a pipe works too."""
    lines = _file_lines(stream)
    ahead = list(itertools.islice(lines, 2))
    if ahead:
        problem = _not_jsonl(ahead[0], ahead[1] if len(ahead) > 1 else None)
        if problem is not None:
            raise typer.BadParameter(f"{name}: {problem}")
    return itertools.chain(ahead, lines)


def _count_lines(stream: IO[bytes]) -> int | None:
    """Non-blank lines of a regular file (then rewound); None for a pipe."""
    if not stream.seekable():
        return None
    total = sum(1 for raw in stream if raw.strip())
    stream.seek(0)
    return total


def _progress(total: int | None, show: bool) -> Any:
    """A rich progress bar on stderr (only on a terminal); its task carries the refusals."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = console(stderr=True)
    return Progress(TextColumn("publishing"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("refused {task.fields[refused]}"), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=err,
                    disable=not (show and err.is_terminal))


def _validated(summary: Summary, where: str, item: Any) -> Any | None:
    """The message of an item (bytes are parsed first), or None when it is refused."""
    from gapless.message import InvalidMessage, parse_message, validate_message

    try:
        return (parse_message(item, "application/json") if isinstance(item, bytes)
                else validate_message(item))
    except InvalidMessage as exc:
        summary.refuse(where, exc.reason)
        return None


async def publish_all(settings: Settings, items: Iterator[tuple[str, Any]], *,
                      total: int | None, priority: str | None, rate: float | None,
                      in_flight: int, show_progress: bool) -> Summary:
    """Validate and publish ``items`` (``(where, dict | bytes)``) with pipelined confirms: the
    valid messages go out in chunks of half ``in_flight`` (:meth:`Publisher.publish_many`: a
    chunk is written to the channel whole, its confirms awaited together), two chunks in flight
    at once, so at most ``in_flight`` messages await their confirm and the next chunk is
    validated while the last one's confirms come back. Invalid messages are refused unsent.
    With ``rate``, what is gathered goes out before each pause of the schedule."""
    from gapless.amqp.publisher import Publisher

    summary = Summary()
    chunk_size = max(1, in_flight // 2)
    slots = asyncio.Semaphore(2 if in_flight > 1 else 1)
    progress = _progress(total, show_progress)
    bar = progress.add_task("publish", total=total, refused=0)
    pending: set[asyncio.Task[None]] = set()
    chunk: list[tuple[str, Any]] = []

    async def send(publisher: Publisher, batch: list[tuple[str, Any]]) -> None:
        try:
            outcomes = await publisher.publish_many([message for _, message in batch],
                                                    priority=priority)
            for (where, _), outcome in zip(batch, outcomes, strict=True):
                if outcome is None:
                    summary.confirmed += 1
                else:
                    summary.refuse(where, str(outcome))
        finally:
            slots.release()
            progress.update(bar, advance=len(batch), refused=summary.refused)

    async def flush(publisher: Publisher) -> None:
        nonlocal chunk
        if not chunk:
            return
        batch, chunk = chunk, []
        await slots.acquire()
        summary.published += len(batch)
        task = asyncio.create_task(send(publisher, batch))
        pending.add(task)
        task.add_done_callback(pending.discard)

    started = time.monotonic()
    with progress:
        async with Publisher(settings) as publisher:
            for index, (where, item) in enumerate(items):
                message = _validated(summary, where, item)
                if message is None:
                    progress.update(bar, advance=1, refused=summary.refused)
                    continue
                if rate:
                    # Hold the schedule of ``rate`` messages a second (pacing, not
                    # synchronisation); what is gathered goes out first.
                    delay = started + index / rate - time.monotonic()
                    if delay > 0:
                        await flush(publisher)
                        await asyncio.sleep(delay)
                chunk.append((where, message))
                if len(chunk) >= chunk_size:
                    await flush(publisher)
                elif len(chunk) % YIELD_EVERY == 0:
                    # Let the loop run between validations: the chunk written last goes out
                    # and its confirms are read while this one is being validated.
                    await asyncio.sleep(0)
            await flush(publisher)
            if pending:
                await asyncio.gather(*pending)
    return summary


def _check_usage(file: str | None, demo: int | None, priority: str | None,
                 rate: float | None, reject_every: int | None, in_flight: int) -> None:
    """Refuse a bad combination of flags (a usage error, exit 2)."""
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


def _demo_items(count: int, *, tenant: str, series: str, priority: str,
                reject_every: int | None) -> Iterator[tuple[str, Any]]:
    """Sample messages; a bad --tenant/--series is a usage error, not ``count`` refusals."""
    from gapless.message import InvalidMessage, validate_message

    try:
        validate_message(next(sample_messages(1, tenant=tenant, series=series,
                                              priority=priority)))
    except InvalidMessage as exc:
        raise typer.BadParameter(exc.reason) from None
    return ((f"demo {n}", message) for n, message in enumerate(
        sample_messages(count, tenant=tenant, series=series, priority=priority,
                        reject_every=reject_every), start=1))


def _report(summary: Summary, as_json: bool) -> None:
    """The summary on stdout (one line, or JSON); each refusal on stderr."""
    if as_json:
        echo_json({"published": summary.published, "confirmed": summary.confirmed,
                   "refused": summary.refused, "refusals": summary.refusals})
        return
    for refusal in summary.refusals:
        echo(f"refused {refusal['at']}: {refusal['reason']}", err=True)
    if summary.refused > len(summary.refusals):
        echo(f"... and {summary.refused - len(summary.refusals)} more refusals", err=True)
    echo(summary.line())


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
    in_flight: int = typer.Option(DEFAULT_IN_FLIGHT, "--in-flight",
                                  help="Confirms awaited at once."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    progress: bool = typer.Option(True, "--progress/--no-progress",
                                  help="Progress bar on stderr (only on a terminal)."),
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
) -> None:
    """Publish invoices (persistent, with publisher confirms); print a one-line summary."""
    _check_usage(file, demo, priority, rate, reject_every, in_flight)
    settings = settings_from(amqp_url=amqp_url, queue=queue)
    stream: IO[bytes] | None = None
    if demo is not None:
        total: int | None = demo
        items = _demo_items(demo, tenant=tenant, series=series, priority=priority or "batch",
                            reject_every=reject_every)
    else:
        assert file is not None
        stream = _open_file(file)
        try:
            total = _count_lines(stream)
            lines = _jsonl_lines(stream, "stdin" if file == "-" else file)
        except BaseException:
            if stream is not sys.stdin.buffer:
                stream.close()
            raise
        items = ((f"line {number}", raw) for number, raw in lines)
    try:
        summary = run(publish_all(settings, items, total=total, priority=priority, rate=rate,
                                  in_flight=in_flight, show_progress=progress))
    finally:
        if stream is not None and stream is not sys.stdin.buffer:
            stream.close()
    _report(summary, as_json)
    if summary.refused:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("publish")(publish)
