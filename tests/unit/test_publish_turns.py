"""``gapless publish --file`` writes a chunk while it validates the next: the event loop gets a
turn every few validated messages, so the task that writes a flushed chunk starts at once
instead of after the next chunks are validated (bench/publish.py measures what that is worth).
The broker stands aside here (a recording publisher); tests/integration/test_cli_publish_file.py
publishes for real."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, ClassVar

import pytest

from gapless.amqp import publisher as publisher_module
from gapless.cli import publish as command
from gapless.demo.samples import sample_messages
from gapless.settings import load_settings


class RecordingPublisher:
    """Stands for :class:`gapless.amqp.publisher.Publisher`: notes how many lines had been read
    when each chunk's write began, and confirms everything."""

    read: ClassVar[int] = 0
    writes: ClassVar[list[int]] = []

    def __init__(self, settings: Any) -> None:
        pass

    async def __aenter__(self) -> RecordingPublisher:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        pass

    async def publish_many(self, messages: Sequence[Any], *,
                           priority: str | None = None) -> list[None]:
        RecordingPublisher.writes.append(RecordingPublisher.read)
        return [None] * len(messages)


def lines(count: int) -> Iterator[tuple[str, Any]]:
    for number, message in enumerate(sample_messages(count, tenant="acme", series="ABC",
                                                     priority="batch"), start=1):
        RecordingPublisher.read = number
        yield f"line {number}", json.dumps(message).encode()


async def test_a_flushed_chunk_is_written_while_the_next_is_validated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publisher_module, "Publisher", RecordingPublisher)
    RecordingPublisher.writes = []
    in_flight = 8 * command.YIELD_EVERY  # chunks of four turns
    chunk = in_flight // 2
    summary = await command.publish_all(load_settings(), lines(3 * chunk), total=None,
                                        priority=None, rate=None, in_flight=in_flight,
                                        show_progress=False)
    assert (summary.published, summary.confirmed, summary.refused) == (3 * chunk,) * 2 + (0,)
    # The first chunk is written within a turn of its flush, not once the second chunk (and the
    # third's first line) had been read, as when the loop got no turn between flushes.
    assert RecordingPublisher.writes[0] <= chunk + command.YIELD_EVERY
    assert len(RecordingPublisher.writes) == 3
