#!/usr/bin/env python3
"""Publish invoice messages to gapless with plain pika: a producer that does not use gapless.

What it does is the producer's contract (docs/message.md, "Publishing"):

* the **default exchange**, routing key ``GAPLESS_QUEUE`` (``invoices`` by default); with
  ``GAPLESS_QUEUE_TYPE=quorum`` user work goes to ``<GAPLESS_QUEUE>.user``;
* ``content_type=application/json``, ``delivery_mode=2`` (persistent), the AMQP ``priority``
  property 4 for user work and 1 for batch (the message's ``priority`` field, or ``--priority``),
  ``message_id`` the ``invoice_id``;
* **publisher confirms** and the ``mandatory`` flag: a message counts as sent only once the
  broker confirmed it; an unroutable one (no queue: start a ``gapless worker`` first, which
  declares it) or a nacked one is reported and the exit status is 1. It never declares the queue.

The body is sent exactly as read (decimal strings keep their digits). Messages come from a JSON
Lines file (one JSON object per line; ``-`` reads standard input) or from the arguments::

    GAPLESS_QUEUE=invoices python pika_producer.py --file messages.jsonl
    python pika_producer.py '{"invoice_id": "shop-42-1", "tenant": "acme", ...}'

Exit status: 0 every message confirmed, 1 some refused or unconfirmed, 2 bad input or usage.
Needs ``pip install pika`` (1.3 or later).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pika.exceptions

PRIORITIES = {"user": 4, "batch": 1}


@dataclass(frozen=True)
class Outgoing:
    """One message to publish: its body as read, its key, and where it goes."""

    body: bytes
    invoice_id: str
    priority: int
    routing_key: str


class BadInput(Exception):
    """A message that is not a JSON object with an invoice_id (one-line reason)."""


def read_messages(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """``(where, text)`` of every message: the file's non-blank lines, or the arguments."""
    if args.file is None:
        for index, text in enumerate(args.messages, 1):
            yield f"argument {index}", text
        return
    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    with stream:
        for number, line in enumerate(stream, 1):
            if line.strip():
                yield f"line {number}", line.strip()


def outgoing(where: str, text: str, *, queue: str, quorum: bool,
             priority: str | None) -> Outgoing:
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where}: not JSON ({exc.msg}); one JSON object per line") from None
    if not isinstance(message, dict) or not isinstance(message.get("invoice_id"), str):
        raise BadInput(f"{where}: must be a JSON object with a string invoice_id")
    wanted = priority or message.get("priority") or "batch"
    if wanted not in PRIORITIES:
        raise BadInput(f"{where}: priority must be \"user\" or \"batch\"")
    amqp_priority = PRIORITIES[wanted]
    routing_key = f"{queue}.user" if quorum and amqp_priority >= 4 else queue
    return Outgoing(text.encode("utf-8"), message["invoice_id"], amqp_priority, routing_key)


def publish(channel: pika.adapters.blocking_connection.BlockingChannel,
            message: Outgoing) -> str | None:
    """Publish one message and wait for its confirm; None when confirmed, else why not."""
    properties = pika.BasicProperties(
        content_type="application/json", delivery_mode=pika.DeliveryMode.Persistent,
        priority=message.priority, message_id=message.invoice_id[:255], app_id="pika-producer")
    try:
        channel.basic_publish(exchange="", routing_key=message.routing_key, body=message.body,
                              properties=properties, mandatory=True)
    except pika.exceptions.UnroutableError:
        return f"unroutable: no queue {message.routing_key!r} (start a gapless worker first)"
    except pika.exceptions.NackError:
        return "the broker refused it (nack); publishing it again is safe"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Publish gapless invoice messages with pika.")
    parser.add_argument("--file", help="a JSON Lines file of messages ('-': standard input)")
    parser.add_argument("--priority", choices=sorted(PRIORITIES),
                        help="the priority of every message (default: each message's own, "
                             "else batch)")
    parser.add_argument("messages", nargs="*", help="messages as JSON text (without --file)")
    args = parser.parse_args(argv)
    if (args.file is None) == (not args.messages):
        parser.error("give --file or messages as arguments (one of them)")
    urls = os.environ.get("GAPLESS_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    queue = os.environ.get("GAPLESS_QUEUE", "invoices")
    quorum = os.environ.get("GAPLESS_QUEUE_TYPE", "classic") == "quorum"
    try:
        messages = [outgoing(where, text, queue=queue, quorum=quorum, priority=args.priority)
                    for where, text in read_messages(args)]
    except (BadInput, OSError, UnicodeDecodeError) as exc:
        print(f"pika_producer: {exc}", file=sys.stderr)
        return 2
    # Every node of a cluster (GAPLESS_AMQP_URL may list several): pika tries them in turn.
    nodes = [pika.URLParameters(url.strip()) for url in urls.split(",") if url.strip()]
    try:
        connection = pika.BlockingConnection(nodes)
    except pika.exceptions.AMQPConnectionError as exc:
        print(f"pika_producer: no RabbitMQ node answers ({type(exc).__name__})",
              file=sys.stderr)
        return 1
    failed = confirmed = 0
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for message in messages:
            problem = publish(channel, message)
            if problem is None:
                confirmed += 1
                print(f"confirmed {message.invoice_id} -> {message.routing_key} "
                      f"(priority {message.priority})")
            else:
                failed += 1
                print(f"refused {message.invoice_id}: {problem}", file=sys.stderr)
    except pika.exceptions.AMQPError as exc:
        # The outcome of the message in flight is unknown: publishing again is safe (the
        # worker maps a repeated invoice_id onto the same invoice).
        print(f"pika_producer: the connection failed ({type(exc).__name__}) after "
              f"{confirmed + failed} of {len(messages)} messages; publish the rest again",
              file=sys.stderr)
        return 1
    finally:
        if connection.is_open:
            connection.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
