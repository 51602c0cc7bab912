"""The hostile-input tier: I4 against whatever a producer can put on the queue.

Real workers and recovery (``gapless`` processes), real RabbitMQ and PostgreSQL, the mock
integrator over HTTP. Each hypothesis example publishes good invoices of every kind beside
hostile ones (:mod:`tests.hostile.strategies`); then:

- every good invoice is ISSUED: nothing hostile stalled a worker;
- every hostile publish is an invoice row or a dead letter (nothing lost), and no row is left
  SENDING or RECEIVED: each is ISSUED, or final with a recorded reason;
- ``audit``, ``chain verify`` (database) and ``chain export`` + ``chain verify DIR`` are clean;
- ``invoice show`` (text and ``--json``), ``audit`` and ``dead list`` print every hostile value
  without a crash and without a terminal escape, a C1 control or a bidi override.

Examples are derandomized so CI sees the same ones every run; ``GAPLESS_HOSTILE_EXAMPLES`` and
``GAPLESS_HOSTILE_RANDOM=1`` explore more.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aio_pika
import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gapless.amqp.topology import work_queue
from gapless.constants import dead_queue_name
from gapless.demo.samples import sample_messages
from gapless.settings import Settings
from tests.helpers import GAPLESS, wait_until
from tests.hostile.strategies import Hostile, hostile_messages
from tests.mock_client import MockIntegratorClient
from tests.recovery_support import Processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("GAPLESS_HOSTILE_EXAMPLES", "3"))
GOOD_PER_EXAMPLE = 6
HOSTILE_PER_EXAMPLE = 20
ISSUER = ["--tax-id", "1234567808", "--name", "Acme Bilişim A.Ş.", "--tax-office", "Kadıköy",
          "--street", "Söğütlüçeşme Cd. 12", "--district", "Kadıköy", "--city", "İstanbul",
          "--postal-zone", "34716"]
#: Bytes an operator's terminal must never receive from data: ESC, CSI, other C1 controls,
#: bidirectional overrides and isolates.
FORBIDDEN_OUTPUT = [b"\x1b", b"\xc2\x9b", b"\xc2\x85", b"\xe2\x80\xae", b"\xe2\x80\xab",
                    b"\xe2\x81\xa6", b"\xe2\x81\xa7", b"\xe2\x81\xa8"]
FINAL = {"ISSUED", "ERROR", "REJECTED", "CANCELLED", "VOIDED"}


def gapless(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[
        bytes]:
    return subprocess.run([*GAPLESS, *args], env=env, capture_output=True, timeout=timeout,
                          check=False)


def assert_printable(result: subprocess.CompletedProcess[bytes], what: object) -> None:
    """No traceback, and none of the bytes a terminal would act on."""
    output = result.stdout + result.stderr
    assert b"Traceback" not in output, (what, output[-3000:])
    for forbidden in FORBIDDEN_OUTPUT:
        assert forbidden not in output, (what, forbidden, output[-2000:])


class System:
    """The processes of the tier and what it published so far."""

    def __init__(self, settings: Settings, env: dict[str, str], procs: Processes) -> None:
        self.settings = settings
        self.env = env
        self.procs = procs
        self.good: set[str] = set()
        self.hostile: list[Hostile] = []
        self.examples = 0

    def rows(self) -> dict[str, tuple[str, str | None, int | None]]:
        with psycopg.connect(self.settings.database_url) as conn:
            return {invoice_id: (status, last_error, reserved_no)
                    for invoice_id, status, last_error, reserved_no in conn.execute(
                        "SELECT invoice_id, status, last_error, reserved_no FROM invoices")}

    def dead_count(self) -> int:
        async def count() -> int:
            connection = await aio_pika.connect(self.settings.amqp_url)
            async with connection:
                channel = await connection.channel()
                queue = await channel.declare_queue(dead_queue_name(self.settings.queue),
                                                    passive=True)
                return int(queue.declaration_result.message_count or 0)
        return asyncio.run(count())

    def queued(self) -> int:
        async def count() -> int:
            connection = await aio_pika.connect(self.settings.amqp_url)
            async with connection:
                channel = await connection.channel()
                queue = await channel.declare_queue(self.settings.queue, passive=True)
                return int(queue.declaration_result.message_count or 0)
        return asyncio.run(count())

    def publish(self, good: list[dict[str, Any]], hostile: list[Hostile]) -> None:
        """Good and hostile messages interleaved, each confirmed by the broker."""
        async def send() -> None:
            connection = await aio_pika.connect(self.settings.amqp_url)
            async with connection:
                channel = await connection.channel(publisher_confirms=True)
                items: list[tuple[bytes, dict[str, Any], int]] = []
                for n in range(max(len(good), len(hostile))):
                    if n < len(good):
                        items.append((json.dumps(good[n]).encode(), {}, 1))
                    if n < len(hostile):
                        items.append((hostile[n].body, hostile[n].headers, 4))
                for body, headers, priority in items:
                    await channel.default_exchange.publish(
                        aio_pika.Message(body, headers=headers or None,
                                         content_type="application/json", priority=priority,
                                         delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=work_queue(self.settings, priority))
        asyncio.run(send())


@pytest.fixture
def system(settings: Settings, integrated_env: dict[str, str], log_dir: Path,
           mock_integrator: MockIntegratorClient) -> Iterator[System]:
    env = integrated_env
    for args in (["series", "add", "acme", "ABC", "--default"],
                 ["tenant", "set", "acme", *ISSUER]):
        result = gapless(env, *args)
        assert result.returncode == 0, result.stderr.decode()
    procs = Processes(env, log_dir)
    try:
        for name in ("worker-a", "worker-b"):
            procs.worker(name, "--concurrency", "8")
        procs.recovery("recovery", "--interval", "0.5", "--stuck-after", "3",
                       "--max-attempts", "2", "--backoff-base", "0.2", "--backoff-max", "1")
        yield System(settings, env, procs)
    finally:
        procs.close()


def settled(system: System) -> bool:
    """Every good invoice ISSUED; every hostile publish a row or a dead letter; no row busy."""
    rows = system.rows()
    if any(rows.get(invoice_id, ("",))[0] != "ISSUED" for invoice_id in system.good):
        return False
    hostile_ids = {h.invoice_id for h in system.hostile}
    held = [rows[i] for i in hostile_ids if i in rows]
    if any(status not in FINAL for status, _, _ in held):
        return False
    return len(held) + system.dead_count() >= len(system.hostile)


def explain(system: System) -> str:
    rows = system.rows()
    known = system.good | {h.invoice_id for h in system.hostile}
    lines = [f"dead letters: {system.dead_count()}, queued: {system.queued()}, "
             f"hostile published: {len(system.hostile)}",
             *(f"row of an id published by no one: {invoice_id!r} {row}"
               for invoice_id, row in rows.items() if invoice_id not in known)]
    for invoice_id in sorted(system.good):
        if rows.get(invoice_id, ("",))[0] != "ISSUED":
            lines.append(f"good {invoice_id}: {rows.get(invoice_id)}")
    for hostile in system.hostile:
        lines.append(f"hostile {hostile.invoice_id!r} ({hostile.what}): "
                     f"{rows.get(hostile.invoice_id)}")
    for proc in system.procs.started:
        lines.append(f"--- {proc.name}: {proc.output()[-1500:]}")
    return "\n".join(lines)


@settings(max_examples=EXAMPLES, deadline=None,
          derandomize=os.environ.get("GAPLESS_HOSTILE_RANDOM") != "1", database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_messages_never_wedge_a_number(system: System, data: st.DataObject) -> None:
    system.examples += 1
    n = system.examples
    seed = data.draw(st.integers(0, 2**16), label="seed of the base messages")
    bases = list(sample_messages(GOOD_PER_EXAMPLE + HOSTILE_PER_EXAMPLE, tenant="acme",
                                 series="ABC", priority="batch", seed=seed,
                                 run_id=f"e{n:04d}"))
    good = bases[:GOOD_PER_EXAMPLE]
    for base in bases[GOOD_PER_EXAMPLE:]:
        base.setdefault("note", "Teslimat: depo 3")  # a free-text field for the attack
    hostile = [data.draw(hostile_messages(base, f"h{n:04d}n{i:03d}x"), label=f"hostile {i}")
               for i, base in enumerate(bases[GOOD_PER_EXAMPLE:])]
    system.good |= {message["invoice_id"] for message in good}
    system.hostile.extend(hostile)
    system.publish(good, hostile)
    for proc in system.procs.started:
        assert proc.alive(), proc.output()[-3000:]

    deadline = time.monotonic() + 150
    while not settled(system):
        assert time.monotonic() < deadline, explain(system)
        time.sleep(0.5)
    # A settled row has a reason when it is not ISSUED: ERROR, REJECTED and the rest say why.
    rows = system.rows()
    for h in hostile:
        if h.invoice_id in rows:
            status, last_error, _ = rows[h.invoice_id]
            assert status == "ISSUED" or last_error, (h.what, rows[h.invoice_id])
    for proc in system.procs.started:
        assert proc.alive(), proc.output()[-3000:]
    # The operator's view of what this example stored: a few hostile rows shown, the dead
    # letters listed, the audit run — no crash, nothing a terminal would act on.
    held = [h.invoice_id for h in hostile if h.invoice_id in rows][:3]
    for invoice_id in held:
        if not _arguable(invoice_id):
            continue
        shown = gapless(system.env, "invoice", "show", invoice_id, "--tenant", "acme")
        assert shown.returncode == 0, (invoice_id, shown.stderr[-2000:])
        assert_printable(shown, ("invoice show", invoice_id))
    for args in (["dead", "list"], ["audit", "--no-chain"]):
        result = gapless(system.env, *args)
        assert result.returncode == 0, (args, (result.stdout + result.stderr)[-3000:])
        assert_printable(result, args)


def _arguable(text: str) -> bool:
    """Whether ``text`` can be a command-line argument (no NUL, no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def test_hostile_values_print_as_text(system: System, tmp_path: Path) -> None:
    """After hostile messages: the operator's commands and the chain tools still work."""
    # One pass of the property above with a fixed set of the worst values, then the tools.
    bases = list(sample_messages(12, tenant="acme", series="ABC", priority="batch", seed=99,
                                 run_id="print"))
    pieces = ["[/]", "\x1b[31mred", "[link=http://evil.example]x[/link]", "\u202eabc",
              "\u2028\u2029\x85", "\x9b2J", "]]>&<"]
    hostile: list[Hostile] = []
    for i, (base, piece) in enumerate(zip(bases[5:], pieces, strict=False)):
        message = json.loads(json.dumps(base))
        message["invoice_id"] = f"p{i}-{piece}"
        message["note"] = f"note {piece}"
        message["customer"]["name"] = f"{message['customer']['name']} {piece}"
        hostile.append(Hostile(message["invoice_id"],
                               json.dumps(message, ensure_ascii=False).encode(), f"piece {i}"))
    system.good |= {m["invoice_id"] for m in bases[:5]}
    system.hostile.extend(hostile)
    system.publish(bases[:5], hostile)
    wait_until(lambda: settled(system), 150, message="the hostile set to settle")

    env = system.env
    rows = system.rows()
    for h in hostile:
        if h.invoice_id not in rows:
            continue
        for args in (["invoice", "show", h.invoice_id], ["invoice", "show", h.invoice_id,
                                                         "--json"]):
            result = gapless(env, *args)
            assert result.returncode == 0, (args, result.stderr[-2000:])
            assert_printable(result, args)
            if "--json" in args:
                assert json.loads(result.stdout)["invoice_id"] == h.invoice_id
    for args in (["audit"], ["audit", "--json"], ["dead", "list"], ["status"]):
        result = gapless(env, *args)
        assert result.returncode in (0, 1), (args, result.stderr[-2000:])
        assert_printable(result, args)
    audit = gapless(env, "audit", "--json")
    assert audit.returncode == 0, audit.stdout[-3000:]
    chain = gapless(env, "chain", "verify")
    assert chain.returncode == 0, (chain.stdout + chain.stderr)[-3000:]
    out = tmp_path / "export"
    exported = gapless(env, "chain", "export", "--out", str(out))
    assert exported.returncode == 0, (exported.stdout + exported.stderr)[-3000:]
    verified = gapless(env, "chain", "verify", str(out))
    assert verified.returncode == 0, (verified.stdout + verified.stderr)[-3000:]
    assert_printable(verified, "chain verify DIR")
