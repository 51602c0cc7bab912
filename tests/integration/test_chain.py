"""The tamper-evident chain (docs/chain.md, invariant I8) on a real run: the worker, the mock
integrator with faults, rejections, a corrected retry, returns and voids; then ``gapless chain
verify`` and a verifier written here from docs/chain.md alone (no gapless import: plain SQL and
hashlib) must agree — on the clean chain and on every kind of tampering, naming the same number.

Signed checkpoints are taken during the run (``gapless chain keygen``, ``gapless chain
checkpoint``); an attacker written here, with the database and without the key, rewrites a
chain consistently: both verifiers pass it, and the verification against the checkpoints fails,
naming the number — gapless's, and one written here from docs/chain.md (the raw key from the PEM,
the signature over the canonical body); forged and edited checkpoints are refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from psycopg.rows import dict_row
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.ledger.series import add_series
from gapless.numbers import build_series_spec
from gapless.settings import Settings
from tests.conftest import create_database, database_url, drop_database
from tests.helpers import await_until, ledger, run_gapless, today
from tests.mock_client import MockIntegratorClient
from tests.worker_support import publish, running_worker

pytestmark = pytest.mark.timeout(600)


# ------------------------------------------------------------------ a verifier from the doc only
# Written from docs/chain.md; it imports nothing of gapless.

def canon(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return "0" if value == 0 else format(value.normalize(), "f")
    if isinstance(value, str):
        out = ['"']
        for ch in value:
            escapes = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                       "\r": "\\r", "\t": "\\t"}
            if ch in escapes:
                out.append(escapes[ch])
            elif ord(ch) < 0x20:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out) + '"'
    if isinstance(value, dict):
        return "{" + ",".join(canon(k) + ":" + canon(value[k]) for k in sorted(value)) + "}"
    assert isinstance(value, list)
    return "[" + ",".join(canon(v) for v in value) + "]"


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


KEYS = ("seq", "kind", "tenant", "series", "period_key", "reserved_no", "number",
        "invoice_id", "uuid", "message_sha256", "document_sha256", "ref", "reason", "at",
        "migrated")


def doc_verifier(url: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per chain: head, counts and ``broken`` (the smallest number a check fails on, or
    "structure" when only the chain's structure is broken, or None)."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        counters = conn.execute("SELECT * FROM number_counters").fetchall()
        records = conn.execute(
            "SELECT *, uuid::text AS uuid, to_char(at AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS at FROM chain_records "
            "ORDER BY tenant, series, period_key, seq").fetchall()
        invoices = conn.execute(
            "SELECT id, tenant, series, period_key, reserved_no, number, invoice_id, "
            "uuid::text AS uuid, status, payload::text AS payload, document_sha256, "
            "integrator_ref FROM invoices WHERE reserved_no IS NOT NULL").fetchall()
        docs: dict[int, set[str]] = defaultdict(set)
        for d in conn.execute("SELECT invoice_pk, body FROM invoice_documents"):
            docs[d["invoice_pk"]].add(sha(bytes(d["body"])))
    chains: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        chains[r["tenant"], r["series"], r["period_key"]].append(r)
    held: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for inv in invoices:
        held[inv["tenant"], inv["series"], inv["period_key"]][inv["reserved_no"]] = inv
    out = {}
    for c in counters:
        key = (c["tenant"], c["series"], c["period_key"])
        recs, invs = chains[key], held[key]
        bad: set[int] = set()
        structure = False
        prev = sha("gapless-chain/1\n" + canon(
            {"tenant": key[0], "series": key[1], "period_key": key[2]}))
        seals: dict[int, dict[str, Any]] = {}
        msg: dict[int, str] = {}
        last_final: dict[int, dict[str, Any]] = {}
        for i, r in enumerate(recs, start=1):
            if r["seq"] != i:
                structure = True
            elif sha(f"{r['version']}\n{prev}\n" + canon({k: r[k] for k in KEYS})) != r["hash"]:
                bad.add(r["reserved_no"])
            prev = r["hash"]
            no = r["reserved_no"]
            if r["kind"] == "seal":
                if no != len(seals) + 1 or no in seals:
                    bad.add(min(no, len(seals) + 1))
                seals[no] = r
                msg[no] = r["message_sha256"]
                continue
            s = seals.get(no, {})
            if (s.get("invoice_id"), s.get("uuid"), s.get("number")) != (
                    r["invoice_id"], r["uuid"], r["number"]):
                bad.add(no)
            if r["kind"] == "corrected":
                msg[no] = r["message_sha256"]
                continue
            last_final[no] = r
            if r["kind"] == "issued" and r["document_sha256"] is not None and (
                    no not in invs or r["document_sha256"] not in docs[invs[no]["id"]]):
                bad.add(no)
        if (c["chain_seq"], c["chain_hash"]) != ((recs[-1]["seq"], recs[-1]["hash"]) if recs
                                                 else (0, None)):
            structure = True
        bad.update(n for n in range(1, c["last_no"] + 1) if n not in seals)
        bad.update(n for n in seals if n > c["last_no"])
        bad.update(n for n, s in seals.items() if s["invoice_id"] is not None and n not in invs)
        for no, inv in invs.items():
            s = seals.get(no)
            if s is None or (s["invoice_id"], s["uuid"], s["number"]) != (
                    inv["invoice_id"], inv["uuid"], inv["number"]):
                bad.add(no)
                continue
            payload = json.loads(inv["payload"], parse_float=Decimal)
            if sha(canon(payload)) != msg[no]:
                bad.add(no)
            if inv["status"] in ("ISSUED", "REJECTED", "VOIDED"):
                f = last_final.get(no)
                if f is None or f["kind"] != inv["status"].lower() or (
                        inv["status"] == "ISSUED" and (f["document_sha256"], f["ref"]) != (
                            inv["document_sha256"], inv["integrator_ref"])):
                    bad.add(no)
        broken: int | str | None = min(bad) if bad else ("structure" if structure else None)
        out[key] = {"head": (c["chain_seq"], c["chain_hash"]), "records": len(recs),
                    "seals": len(seals), "broken": broken}
    return out


def doc_checkpoint_verifier(url: str, public_pem: Path,
                            directory: Path) -> dict[tuple[str, str, str], int | None]:
    """Per signed chain: the ``last_no`` of the first checkpoint (oldest first) whose head the
    chain no longer holds, or None. Written from docs/chain.md, "Checkpoints": the raw key is
    the last 32 bytes of the PEM's DER, the signature is over the canonical body. A file that
    does not verify raises."""
    der = base64.b64decode("".join(public_pem.read_text().splitlines()[1:-1]))
    raw = der[-32:]
    key = Ed25519PublicKey.from_public_bytes(raw)
    bodies = []
    for path in sorted(directory.glob("checkpoint-*.json")):
        envelope = json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)
        body = envelope["checkpoint"]
        assert body["format"] == "gapless-chain-checkpoint/1"
        assert body["key"] == sha(raw)
        key.verify(base64.b64decode(envelope["signature"]), canon(body).encode("utf-8"))
        bodies.append(body)
    out: dict[tuple[str, str, str], int | None] = {}
    with psycopg.connect(url) as conn:
        for body in sorted(bodies, key=lambda b: b["at"]):
            for c in body["chains"]:
                chain = (c["tenant"], c["series"], c["period_key"])
                row = conn.execute("SELECT hash FROM chain_records WHERE (tenant, series, "
                                   "period_key, seq) = (%s, %s, %s, %s)",
                                   (*chain, c["head_seq"])).fetchone()
                if out.get(chain) is None:
                    out[chain] = None if row and row[0] == c["head_hash"] else c["last_no"]
    return out


# ------------------------------------------------------------------ the run

def message(invoice_id: str, series: str, *, tax_id: str = "1234567890",
            **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "invoice_id": invoice_id, "tenant": "acme", "series": series,
        "issue_date": today(), "currency": "TRY",
        "customer": {"tax_id": tax_id, "name": 'Örnek "Ltd" Şti. / \\ ünïcode'},
        "lines": [{"description": "Widget – \"two\" \\ €", "quantity": "2",
                   "unit_price": "10.00", "vat_rate": "20"}],
    }
    body.update(changes)
    return body


async def settled(engine: AsyncEngine, total: int) -> bool:
    async with engine.connect() as conn:
        done = (await conn.execute(text(
            "SELECT count(*) FROM invoices WHERE status IN ('ISSUED', 'REJECTED', 'VOIDED')"
        ))).scalar_one()
    return int(done) == total


async def scalar(engine: AsyncEngine, query: str) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(query))).scalar_one()


def chain_verify(env: dict[str, str], url: str) -> tuple[int, str]:
    result = run_gapless(["chain", "verify"], {**env, "GAPLESS_DATABASE_URL": url})
    return result.returncode, result.stdout + result.stderr


async def settled_run(engine: AsyncEngine, settings: Settings, gapless_env: dict[str, str],
                      mock_integrator: MockIntegratorClient, db_name: str,
                      tmp_path: Path) -> dict[str, Any]:
    """A few hundred invoices through the real worker with faults, settled by recovery; two
    rejections voided, one retried with a corrected message; the database, frozen."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
        await add_series(tx, build_series_spec("acme", "XYZ"))
    env = {**gapless_env, "GAPLESS_INTEGRATOR_URL": mock_integrator.url}
    worker_settings = settings.with_overrides(integrator_url=mock_integrator.url,
                                              retry_wait_s=0.02, retry_max_s=2.0)
    mock_integrator.set_faults(latency_ms=[0, 5], transient_rate=0.15, lost_response_rate=0.05)
    rejected = {f"inv-{n}" for n in (7, 58, 123, 190)}
    messages = []
    for n in range(300):
        series = "ABC" if n % 3 else "XYZ"
        invoice_id = f"inv-{n}"
        if invoice_id in rejected:
            messages.append(message(invoice_id, series, tax_id="0000000000"))
        elif n % 25 == 24:  # a return of an earlier sale
            messages.append(message(invoice_id, series, type="IADE", billing_reference=[
                {"number": "ABC2026000000001", "issue_date": today()}]))
        else:
            messages.append(message(invoice_id, series))
    async with running_worker(worker_settings, concurrency=8):
        await publish(worker_settings, *messages)

        async def all_out() -> bool:
            return int(await scalar(engine, "SELECT count(*) FROM invoices WHERE status "
                                    "NOT IN ('RECEIVED', 'SENDING')")) == len(messages)

        await await_until(all_out, 240, message="every invoice left SENDING")
    mock_integrator.set_faults(transient_rate=0.0, lost_response_rate=0.0)
    for _ in range(20):
        if await settled(engine, len(messages)):
            break
        async with engine.begin() as conn:  # the ERROR invoices fall due at once
            await conn.execute(text("UPDATE invoices SET next_attempt_at = now() "
                                    "WHERE status = 'ERROR'"))
        result = run_gapless(["recovery", "--once", "--stuck-after", "0"], env)
        assert result.returncode == 0, result.stderr[-2000:]
    assert await settled(engine, len(messages))
    keys = tmp_path / "keys"
    keys.mkdir()
    result = run_gapless(["chain", "keygen", "--out", str(keys / "chain.key")], env)
    assert result.returncode == 0, result.stderr
    checkpoints = tmp_path / "checkpoints"
    first = take_checkpoint(env, keys / "chain.key", checkpoints)  # before voids and a retry
    for invoice_id in ("inv-7", "inv-123"):
        result = run_gapless(["invoice", "void", invoice_id, "--reason", "issued on paper"], env)
        assert result.returncode == 0, result.stderr
    corrected = tmp_path / "corrected.json"
    corrected.write_text(json.dumps(message("inv-58", "ABC" if 58 % 3 else "XYZ")))
    result = run_gapless(["invoice", "retry", "inv-58", "--payload", str(corrected)], env)
    assert result.returncode == 0, result.stderr
    await await_until(lambda: settled(engine, len(messages)), 60, message="inv-58 issued")
    async with engine.connect() as conn:
        statuses = dict((await conn.execute(text(
            "SELECT status, count(*) FROM invoices GROUP BY status"))).all())
    await engine.dispose()
    second = take_checkpoint(env, keys / "chain.key", checkpoints)
    frozen = f"{db_name}_frozen"
    create_database(frozen, template=db_name)
    return {"db": db_name, "env": env, "statuses": statuses, "frozen": frozen,
            "key": keys / "chain.key", "public_key": keys / "chain.key.pub",
            "checkpoints": checkpoints, "first": first, "second": second}


def take_checkpoint(env: dict[str, str], key: Path, out: Path) -> Path:
    result = run_gapless(["chain", "checkpoint", "--key", str(key), "--out", str(out)], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("chain: checkpoint "), result.stdout
    path = Path(result.stdout.split()[2].rstrip(":"))
    assert path.parent == out
    return path


def signed_head(checkpoint: Path, series: str) -> dict[str, Any]:
    """A chain's head as a checkpoint file says (read as an auditor would: plain JSON)."""
    body = json.loads(checkpoint.read_text(encoding="utf-8"))["checkpoint"]
    [head] = [c for c in body["chains"] if c["series"] == series]
    return {**head, "at": body["at"]}


def copy_of(frozen: str) -> str:
    name = f"{frozen}_{uuid.uuid4().hex[:6]}"
    create_database(name, template=frozen)
    return name


def tamper(url: str, *statements: str) -> None:
    """Change the database as a superuser could: every trigger off."""
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("SET session_replication_role = replica")
        for statement in statements:
            conn.execute(statement)
        conn.commit()


def one(url: str, query: str) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0] if len(row) == 1 else row


async def test_a_real_run_verifies_both_verifiers_agree_and_tampering_is_caught(
        engine: AsyncEngine, settings: Settings, gapless_env: dict[str, str],
        mock_integrator: MockIntegratorClient, db_name: str, tmp_path: Path) -> None:
    run = await settled_run(engine, settings, gapless_env, mock_integrator, db_name, tmp_path)
    try:
        check_clean(run)
        check_export(run, tmp_path / "export")
        for case in sorted(TAMPERING):
            check_tampering(run, case)
        check_inserted_record(run)
        check_checkpoints(run, tmp_path / "anchored")
        check_rewritten_chain(run, tmp_path / "rewritten")
        check_rewritten_after_a_checkpoint(run)
    finally:
        drop_database(run["frozen"])


def check_clean(settled_run: dict[str, Any]) -> None:
    url = database_url(settled_run["frozen"])
    assert settled_run["statuses"] == {"ISSUED": 297, "REJECTED": 1, "VOIDED": 2}
    code, out = chain_verify(settled_run["env"], url)
    assert code == 0, out
    assert "chain: verified, 2 chain(s), 300 sealed number(s)" in out
    mine = doc_verifier(url)
    assert [v["broken"] for v in mine.values()] == [None, None]
    assert sum(v["seals"] for v in mine.values()) == 300
    kinds = dict(one(url, "SELECT json_object_agg(kind, n) FROM (SELECT kind, count(*) AS n "
                          "FROM chain_records GROUP BY kind) k"))
    assert kinds == {"seal": 300, "issued": 297, "rejected": 4, "voided": 2, "corrected": 1}
    for (_, series, _), v in mine.items():
        assert f"{v['head'][0]}:{v['head'][1][:16]}" in out, series


def check_export(settled_run: dict[str, Any], out: Path) -> None:
    """An export verifies offline (no database) with the same result; a document byte or a
    record changed in the export is caught naming the number."""
    env, url = settled_run["env"], database_url(settled_run["frozen"])
    result = run_gapless(["chain", "export", "--out", str(out)],
                         {**env, "GAPLESS_DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    offline_env = {**env, "GAPLESS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    result = run_gapless(["chain", "verify", str(out)], offline_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chain: verified, 2 chain(s), 300 sealed number(s)" in result.stdout
    issued = one(url, "SELECT reserved_no, document_sha256 FROM invoices "
                      "WHERE invoice_id = 'inv-41'")
    document = out / "documents" / issued[1]
    original = document.read_bytes()
    document.write_bytes(original[:4] + b"#" + original[5:])
    result = run_gapless(["chain", "verify", str(out)], offline_env)
    assert result.returncode == 1, result.stdout
    assert f"({issued[0]}):" in result.stdout
    document.write_bytes(original)
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    changed = next(i for i, line in enumerate(lines) if '"kind": "issued"' in line)
    record = json.loads(lines[changed])
    lines[changed] = json.dumps({**record, "ref": "MI-FORGED"}, ensure_ascii=False)
    (out / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_gapless(["chain", "verify", str(out)], offline_env)
    assert result.returncode == 1, result.stdout
    assert f"({record['reserved_no']}):" in result.stdout


TAMPERING = {
    "an amount changed in a stored message": (
        "SELECT reserved_no FROM invoices WHERE invoice_id = 'inv-40'",
        ["UPDATE invoices SET payload = jsonb_set(payload, '{lines,0,unit_price}', '\"11.00\"') "
         "WHERE invoice_id = 'inv-40'"]),
    "a stored document byte changed": (
        "SELECT reserved_no FROM invoices WHERE invoice_id = 'inv-41'",
        ["UPDATE invoice_documents d SET body = overlay(body placing '\\x20'::bytea from 5 "
         "for 1) FROM invoices i WHERE i.id = d.invoice_pk AND i.invoice_id = 'inv-41' "
         "AND d.sha256 = i.document_sha256"]),
    "two numbers swapped": (
        "SELECT least(a.reserved_no, b.reserved_no) FROM invoices a, invoices b "
        "WHERE a.invoice_id = 'inv-43' AND b.invoice_id = 'inv-44'",
        ["CREATE TEMP TABLE s AS SELECT invoice_id, reserved_no, number FROM invoices "
         "WHERE invoice_id IN ('inv-43', 'inv-44')",
         "UPDATE invoices SET reserved_no = reserved_no + 100000000, number = 'x' || number "
         "WHERE invoice_id IN ('inv-43', 'inv-44')",
         "UPDATE invoices i SET reserved_no = s.reserved_no, number = s.number FROM s "
         "WHERE s.invoice_id = CASE i.invoice_id WHEN 'inv-43' THEN 'inv-44' ELSE 'inv-43' END "
         "AND i.invoice_id IN ('inv-43', 'inv-44')"]),
    "a seal record deleted": (
        "SELECT reserved_no FROM invoices WHERE invoice_id = 'inv-46'",
        ["DELETE FROM chain_records r USING invoices i WHERE i.invoice_id = 'inv-46' "
         "AND r.kind = 'seal' AND (r.tenant, r.series, r.period_key, r.reserved_no) = "
         "(i.tenant, i.series, i.period_key, i.reserved_no)"]),
    "an issued record deleted": (
        "SELECT reserved_no FROM invoices WHERE invoice_id = 'inv-47'",
        ["DELETE FROM chain_records r USING invoices i WHERE i.invoice_id = 'inv-47' "
         "AND r.kind = 'issued' AND (r.tenant, r.series, r.period_key, r.reserved_no) = "
         "(i.tenant, i.series, i.period_key, i.reserved_no)"]),
    "a rejected invoice's row deleted": (
        "SELECT reserved_no FROM invoices WHERE invoice_id = 'inv-190'",
        ["DELETE FROM invoices WHERE invoice_id = 'inv-190'"]),
    "the tail truncated": (
        "SELECT min(reserved_no) FROM chain_records WHERE series = 'ABC' AND seq > "
        "(SELECT max(seq) - 6 FROM chain_records WHERE series = 'ABC')",
        ["DELETE FROM chain_records WHERE series = 'ABC' AND seq > "
         "(SELECT max(seq) - 6 FROM chain_records WHERE series = 'ABC')"]),
}


def check_tampering(settled_run: dict[str, Any], case: str) -> None:
    expected_query, statements = TAMPERING[case]
    name = copy_of(settled_run["frozen"])
    try:
        url = database_url(name)
        expected = one(url, expected_query)
        tamper(url, *statements)
        code, out = chain_verify(settled_run["env"], url)
        assert code == 1, (case, out)
        assert f"({expected}):" in out, (case, out)
        assert expected in [v["broken"] for v in doc_verifier(url).values()]
    finally:
        drop_database(name)


def check_inserted_record(settled_run: dict[str, Any]) -> None:
    """An attacker who knows the format appends a 'voided' record for an ISSUED number, with
    a correct hash (and even moves the head): the invoice's state gives it away."""
    name = copy_of(settled_run["frozen"])
    try:
        url = database_url(name)
        with psycopg.connect(url, row_factory=dict_row) as conn:
            last = conn.execute(
                "SELECT *, uuid::text AS uuid FROM chain_records WHERE series = 'ABC' "
                "ORDER BY seq DESC LIMIT 1").fetchone()
            victim = conn.execute(
                "SELECT i.*, i.uuid::text AS uuid FROM invoices i "
                "WHERE i.invoice_id = 'inv-50'").fetchone()
        assert last is not None
        assert victim is not None
        at = "2026-11-25T10:00:00.000000Z"
        forged = {"seq": last["seq"] + 1, "kind": "voided", "tenant": "acme",
                  "series": victim["series"], "period_key": victim["period_key"],
                  "reserved_no": victim["reserved_no"], "number": victim["number"],
                  "invoice_id": "inv-50",
                  "uuid": victim["uuid"], "message_sha256": None, "document_sha256": None,
                  "ref": None, "reason": "never sent", "at": at, "migrated": False}
        assert victim["series"] == "ABC"
        forged_hash = sha(f"gapless-chain/1\n{last['hash']}\n{canon(forged)}")
        with psycopg.connect(url) as conn:
            conn.execute("SET session_replication_role = replica")
            conn.execute(
                "INSERT INTO chain_records (tenant, series, period_key, seq, version, kind, "
                "reserved_no, number, invoice_id, uuid, reason, at, hash) VALUES "
                "(%s, %s, %s, %s, 'gapless-chain/1', 'voided', %s, %s, %s, %s, %s, %s, %s)",
                ("acme", "ABC", victim["period_key"], forged["seq"], victim["reserved_no"],
                 victim["number"], "inv-50", victim["uuid"], "never sent",
                 at, forged_hash))
            conn.execute("UPDATE number_counters SET chain_seq = %s, chain_hash = %s "
                         "WHERE series = 'ABC'", (forged["seq"], forged_hash))
        code, out = chain_verify(settled_run["env"], url)
        assert code == 1, out
        assert f"({victim['reserved_no']}):" in out
        assert "last final record is voided" in out
        assert victim["reserved_no"] in [v["broken"] for v in doc_verifier(url).values()]
    finally:
        drop_database(name)


async def test_sql_clients_sealing_directly_get_seal_records(
        engine: AsyncEngine, db_url: str, gapless_env: dict[str, str]) -> None:
    await add_series(ledger(engine), build_series_spec("acme", "ABC"))
    async with engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO invoices (invoice_id, tenant, series, payload) "
            "VALUES ('shop-1', 'acme', 'ABC', "
            "'{\"total\": 1.50, \"b\": [1e3, -0.0], \"c\": \"a\\n\\u001f/\"}')"))
    async with engine.begin() as conn:
        await conn.execute(text("SELECT * FROM reserve_number('shop-1')"))
        await conn.execute(text("SELECT next_number('acme', 'ABC')"))
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT seq, kind, reserved_no, invoice_id, message_sha256 FROM chain_records "
            "ORDER BY seq"))).all()
    assert [(r.seq, r.kind, r.reserved_no, r.invoice_id) for r in rows] == [
        (1, "seal", 1, "shop-1"), (2, "seal", 2, None)]
    assert rows[0].message_sha256 == sha('{"b":[1000,0],"c":"a\\n\\u001f/","total":1.5}')
    assert rows[1].message_sha256 is None
    await engine.dispose()
    code, out = chain_verify(gapless_env, db_url)
    assert code == 0, out
    assert [v["broken"] for v in doc_verifier(db_url).values()] == [None]


async def test_the_migration_builds_chains_for_an_existing_database(
        db_url: str, gapless_env: dict[str, str]) -> None:
    """A database at schema 0008 with sealed numbers in every state (and a number taken by
    next_number with no invoice) gets, on upgrade, chains that verify, marked migrated; the
    next seal continues them."""
    from gapless.ledger.migrations import migrate
    from tests.helpers import schema_at

    schema_at(db_url, "0008")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO series (tenant, code, prefix) VALUES ('acme', 'OLD', 'OLD')")
        for n in range(1, 6):
            conn.execute("INSERT INTO invoices (invoice_id, tenant, series, payload) "
                         "VALUES (%s, 'acme', 'OLD', %s)", (f"old-{n}", json.dumps(
                             {"invoice_id": f"old-{n}", "total": "1.50"})))
            conn.execute("SELECT * FROM reserve_number(%s)", (f"old-{n}",))
        conn.execute("SELECT next_number('acme', 'OLD')")
        conn.execute("UPDATE invoices SET status = 'SENDING' WHERE invoice_id <> 'old-5'")
        conn.execute("UPDATE invoices SET status = 'ISSUED', integrator_ref = 'r-' || invoice_id "
                     "WHERE invoice_id IN ('old-1', 'old-2')")
        conn.execute("UPDATE invoices SET status = 'REJECTED', last_error = 'bad' "
                     "WHERE invoice_id IN ('old-3', 'old-4')")
        conn.execute("UPDATE invoices SET status = 'VOIDED', last_error = 'paper' "
                     "WHERE invoice_id = 'old-4'")
    migrate(db_url, 0)
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT seq, kind, reserved_no, invoice_id, migrated "
                            "FROM chain_records ORDER BY seq").fetchall()
        assert rows == [
            (1, "seal", 1, "old-1", True), (2, "seal", 2, "old-2", True),
            (3, "seal", 3, "old-3", True), (4, "seal", 4, "old-4", True),
            (5, "seal", 5, "old-5", True), (6, "seal", 6, None, True),
            (7, "issued", 1, "old-1", True), (8, "issued", 2, "old-2", True),
            (9, "rejected", 3, "old-3", True), (10, "voided", 4, "old-4", True)]
        conn.execute("INSERT INTO invoices (invoice_id, tenant, series) "
                     "VALUES ('new-7', 'acme', 'OLD')")
        conn.execute("SELECT * FROM reserve_number('new-7')")
        assert conn.execute("SELECT kind, reserved_no, migrated FROM chain_records "
                            "WHERE seq = 11").fetchone() == ("seal", 7, False)
    code, out = chain_verify(gapless_env, db_url)
    assert code == 0, out
    assert "migrated" in out
    assert [v["broken"] for v in doc_verifier(db_url).values()] == [None]


# ------------------------------------------------------------------ checkpoints (the anchor)

def verify_signed(settled_run: dict[str, Any], url: str, *args: str,
                  checkpoints: Path | None = None) -> tuple[int, str]:
    result = run_gapless(["chain", "verify", *args, "--public-key",
                          str(settled_run["public_key"]), "--checkpoints",
                          str(checkpoints or settled_run["checkpoints"])],
                         {**settled_run["env"], "GAPLESS_DATABASE_URL": url})
    return result.returncode, result.stdout + result.stderr


def check_checkpoints(settled_run: dict[str, Any], tmp_path: Path) -> None:
    """Both checkpoints verify and anchor both chains; a checkpoint from before later records
    still does (the chains have grown since: fine); an export carries them to the auditor."""
    env, url = settled_run["env"], database_url(settled_run["frozen"])
    first, second = settled_run["first"], settled_run["second"]
    code, out = verify_signed(settled_run, url)
    assert code == 0, out
    assert set(doc_checkpoint_verifier(url, settled_run["public_key"],
                                       settled_run["checkpoints"]).values()) == {None}
    assert "checkpoints: 2 of 2 verified with the public key, the latest signed at " \
        f"{signed_head(second, 'ABC')['at']}" in out
    assert "chain: verified, 2 chain(s), 300 sealed number(s), 2 matching a signed " \
        "checkpoint" in out
    older = tmp_path / "older"
    older.mkdir(parents=True)
    (older / first.name).write_bytes(first.read_bytes())
    code, out = verify_signed(settled_run, url, checkpoints=older)
    assert code == 0, out
    for series in ("ABC", "XYZ"):
        head = signed_head(first, series)
        assert head["head_seq"] < signed_head(second, series)["head_seq"]  # grown since
        assert f"{head['at']} (seq {head['head_seq']})" in out.replace("\n", ""), out
    result = run_gapless(["chain", "export", "--out", str(tmp_path / "export"), "--checkpoints",
                          str(settled_run["checkpoints"])], {**env, "GAPLESS_DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    assert "and 2 checkpoint(s)" in result.stdout
    offline = {**env, "GAPLESS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    result = run_gapless(["chain", "verify", str(tmp_path / "export"), "--public-key",
                          str(settled_run["public_key"])], offline)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 matching a signed checkpoint" in result.stdout
    result = run_gapless(["audit", "--json", "--public-key", str(settled_run["public_key"]),
                          "--checkpoints", str(settled_run["checkpoints"])],
                         {**env, "GAPLESS_DATABASE_URL": url})
    report = json.loads(result.stdout)
    assert [v for v in report["violations"] if v["kind"].startswith(("chain", "checkpoint"))] \
        == []
    assert report["chain"]["checkpoints"] == 2
    assert report["chain"]["anchored"] == 2


def rewrite_message(url: str, invoice_id: str, unit_price: str) -> dict[str, Any]:
    """The attacker: a superuser without the key. Changes an amount in a stored message, then
    makes the chain agree — the message's hash where the chain states it, every later record's
    hash, the head — from docs/chain.md alone. Returns the chain's new head."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        conn.execute("SET session_replication_role = replica")  # every trigger off
        conn.execute("UPDATE invoices SET payload = jsonb_set(payload, '{lines,0,unit_price}', "
                     "to_jsonb(%s::text)) WHERE invoice_id = %s", (unit_price, invoice_id))
        inv = conn.execute("SELECT tenant, series, period_key, reserved_no, payload::text AS p "
                           "FROM invoices WHERE invoice_id = %s", (invoice_id,)).fetchone()
        assert inv is not None
        chain = (inv["tenant"], inv["series"], inv["period_key"])
        message = sha(canon(json.loads(inv["p"], parse_float=Decimal)))
        conn.execute("UPDATE invoices SET message_sha256 = %s WHERE invoice_id = %s",
                     (message, invoice_id))
        conn.execute(
            "UPDATE chain_records SET message_sha256 = %s WHERE (tenant, series, period_key, "
            "seq) = (SELECT tenant, series, period_key, max(seq) FROM chain_records WHERE "
            "(tenant, series, period_key) = (%s, %s, %s) AND reserved_no = %s AND kind IN "
            "('seal', 'corrected') GROUP BY tenant, series, period_key)",
            (message, *chain, inv["reserved_no"]))
        records = conn.execute(
            "SELECT *, uuid::text AS uuid, to_char(at AT TIME ZONE 'UTC', "
            "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS at FROM chain_records "
            "WHERE (tenant, series, period_key) = (%s, %s, %s) ORDER BY seq", chain).fetchall()
        prev = sha("gapless-chain/1\n" + canon(
            {"tenant": chain[0], "series": chain[1], "period_key": chain[2]}))
        for r in records:
            recomputed = sha(f"{r['version']}\n{prev}\n" + canon({k: r[k] for k in KEYS}))
            if recomputed != r["hash"]:
                conn.execute("UPDATE chain_records SET hash = %s WHERE (tenant, series, "
                             "period_key, seq) = (%s, %s, %s, %s)", (recomputed, *chain, r["seq"]))
            prev = recomputed
        conn.execute("UPDATE number_counters SET chain_hash = %s WHERE (tenant, series, "
                     "period_key) = (%s, %s, %s)", (prev, *chain))
        conn.commit()
    return {"series": chain[1], "head_seq": records[-1]["seq"], "head_hash": prev}


def check_rewritten_chain(settled_run: dict[str, Any], tmp_path: Path) -> None:
    """inv-40's amount changed and the whole chain recomputed: every check of the chain passes
    (gapless's and the verifier from the document), the checkpoints do not; a checkpoint the
    attacker signs with their own key, or edits, is refused."""
    env, public_key = settled_run["env"], str(settled_run["public_key"])
    name = copy_of(settled_run["frozen"])
    try:
        url = database_url(name)
        number = one(url, "SELECT number FROM invoices WHERE invoice_id = 'inv-40'")
        head = rewrite_message(url, "inv-40", "11.00")
        assert head["series"] == "ABC"
        code, out = chain_verify(env, url)
        assert code == 0, out  # consistent: the chain alone cannot tell
        assert [v["broken"] for v in doc_verifier(url).values()] == [None, None]
        signed = signed_head(settled_run["first"], "ABC")  # the first that no longer matches
        named = (f"chain: BROKEN acme/ABC/{signed['period_key']}: number "
                 f"{signed['last_number']} ({signed['last_no']}): the chain no longer matches "
                 f"the checkpoint signed at {signed['at']} ({settled_run['first'].name})")
        code, out = verify_signed(settled_run, url)
        assert code == 1, out
        assert named in out, out
        assert signed["last_no"] >= int(number[-9:])  # the changed number is under that head
        assert "BROKEN acme/XYZ" not in out
        assert sorted(doc_checkpoint_verifier(url, settled_run["public_key"],
                                              settled_run["checkpoints"]).values(),
                      key=str) == [signed["last_no"], None]  # the verifier from the doc agrees
        # An export of the rewritten database, with the checkpoints: the auditor sees it too.
        export = tmp_path / "export"
        result = run_gapless(["chain", "export", "--out", str(export), "--checkpoints",
                              str(settled_run["checkpoints"])],
                             {**env, "GAPLESS_DATABASE_URL": url})
        assert result.returncode == 0, result.stderr
        offline = {**env, "GAPLESS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
        result = run_gapless(["chain", "verify", str(export)], offline)
        assert result.returncode == 0, result.stdout  # without the key: consistent
        result = run_gapless(["chain", "verify", str(export), "--public-key", public_key],
                             offline)
        assert result.returncode == 1, result.stdout
        assert named in result.stdout
        result = run_gapless(["audit", "--json", "--public-key", public_key, "--checkpoints",
                              str(settled_run["checkpoints"])],
                             {**env, "GAPLESS_DATABASE_URL": url})
        assert result.returncode == 1, result.stderr
        [mismatch] = [v for v in json.loads(result.stdout)["violations"]
                      if v["kind"].startswith(("chain", "checkpoint"))]
        assert (mismatch["kind"], mismatch["series"], mismatch["numbers"]) == \
            ("checkpoint_mismatch", "ABC", str(signed["last_no"]))
        check_forged_checkpoints(settled_run, url, head, tmp_path)
    finally:
        drop_database(name)


def check_forged_checkpoints(settled_run: dict[str, Any], url: str, head: dict[str, Any],
                             tmp_path: Path) -> None:
    """The attacker's checkpoints of the rewritten chain: signed with their own key (naming
    it, or naming ours), or ours edited to the new head. Each is refused, naming the file."""
    env = settled_run["env"]
    forged = tmp_path / "forged"
    result = run_gapless(["chain", "keygen", "--out", str(tmp_path / "mallory.key")], env)
    assert result.returncode == 0, result.stderr
    own = take_checkpoint({**env, "GAPLESS_DATABASE_URL": url}, tmp_path / "mallory.key",
                          forged)
    ours = json.loads(settled_run["second"].read_text(encoding="utf-8"))
    mallory = serialization.load_pem_private_key((tmp_path / "mallory.key").read_bytes(), None)
    assert isinstance(mallory, Ed25519PrivateKey)
    claimed = {**ours["checkpoint"], "at": "2099-01-01T00:00:00.000000Z"}  # names our key
    for chain in claimed["chains"]:
        if chain["series"] == "ABC":
            chain.update(head_seq=head["head_seq"], head_hash=head["head_hash"])
    (forged / "checkpoint-2099-01-01T00-00-00.000000Z.json").write_text(json.dumps({
        "checkpoint": claimed,
        "signature": base64.b64encode(mallory.sign(canon(claimed).encode())).decode()}))
    edited = json.loads(json.dumps(ours))
    edited["checkpoint"]["chains"] = claimed["chains"]
    (forged / settled_run["second"].name).write_text(json.dumps(edited))
    code, out = verify_signed(settled_run, url, checkpoints=forged)
    assert code == 1, out
    assert (f"checkpoint: INVALID {own.name}: signed by key "
            f"{sha(mallory.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))[:16]}…, "  # noqa: E501
            "not by the public key given: refused") in out, out
    for name in ("checkpoint-2099-01-01T00-00-00.000000Z.json", settled_run["second"].name):
        assert (f"checkpoint: INVALID {name}: the signature does not verify with the public "
                "key: forged, or changed after signing") in out, out
    assert "checkpoints: 0 of 3 verified" in out


def check_rewritten_after_a_checkpoint(settled_run: dict[str, Any]) -> None:
    """inv-58's corrected message (recorded after the first checkpoint) changed and the chain
    recomputed: the first checkpoint still matches, the second does not — the change is
    between the two, and the report says so."""
    name = copy_of(settled_run["frozen"])
    try:
        url = database_url(name)
        rewrite_message(url, "inv-58", "12.00")
        assert chain_verify(settled_run["env"], url)[0] == 0
        code, out = verify_signed(settled_run, url)
        assert code == 1, out
        first, second = (signed_head(settled_run[k], "ABC") for k in ("first", "second"))
        assert (f"number {second['last_number']} ({second['last_no']}): the chain no longer "
                f"matches the checkpoint signed at {second['at']}") in out, out
        assert (f"the checkpoint signed at {first['at']} still matches up to seq "
                f"{first['head_seq']} (number {first['last_number']}), so the change is after "
                "it") in out, out
    finally:
        drop_database(name)


async def test_keys_checkpoints_and_a_chain_truncated_below_a_signed_head(
        engine: AsyncEngine, db_url: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    """Numbers sealed by SQL, a checkpoint; then the tail removed consistently (records,
    counter, head), and the whole chain removed: the chain alone passes, the checkpoint does
    not, and the next checkpoint refuses to sign. The private key is nowhere in the
    database."""
    async with ledger(engine).transaction() as tx:
        await add_series(tx, build_series_spec("acme", "ABC"))
    for _ in range(5):
        async with engine.begin() as conn:
            await conn.execute(text("SELECT next_number('acme', 'ABC')"))
    await engine.dispose()
    result = run_gapless(["chain", "keygen", "--out", str(tmp_path / "chain.key")], gapless_env)
    assert result.returncode == 0, result.stderr
    env = {**gapless_env, "GAPLESS_CHAIN_CHECKPOINTS": str(tmp_path / "checkpoints")}
    result = run_gapless(["chain", "checkpoint", "--key", str(tmp_path / "chain.key")], env)
    assert result.returncode == 0, result.stderr
    assert "1 chain head(s) signed" in result.stdout
    [checkpoint] = (tmp_path / "checkpoints").iterdir()
    head = signed_head(checkpoint, "ABC")
    assert (head["last_no"], head["head_seq"]) == (5, 5)
    signed = ["chain", "verify", "--public-key", str(tmp_path / "chain.key.pub")]
    result = run_gapless(signed, env)  # the checkpoints from GAPLESS_CHAIN_CHECKPOINTS
    assert result.returncode == 0, result.stdout + result.stderr
    secret = (tmp_path / "chain.key").read_text().splitlines()[1]
    with psycopg.connect(db_url) as conn:  # nowhere: no table's text holds the key
        tables = conn.execute("SELECT format('%I.%I', schemaname, tablename) FROM pg_tables "
                              "WHERE schemaname = 'public'").fetchall()
        assert len(tables) > 5
        for (table,) in tables:
            assert not conn.execute(f"SELECT 1 FROM {table} t WHERE t::text LIKE %s",
                                    (f"%{secret[:20]}%",)).fetchone(), table
    three = one(db_url, "SELECT hash FROM chain_records WHERE seq = 3")
    tamper(db_url, "DELETE FROM chain_records WHERE seq > 3",
           f"UPDATE number_counters SET last_no = 3, chain_seq = 3, chain_hash = '{three}'")
    code, out = chain_verify(gapless_env, db_url)
    assert code == 0, out
    result = run_gapless(signed, env)
    assert result.returncode == 1, result.stdout
    assert (f"number {head['last_number']} (5): the chain is shorter than the checkpoint "
            f"signed at {head['at']} ({checkpoint.name}): it ends at seq 3, the checkpoint "
            "signed seq 5: records removed") in result.stdout
    # The next scheduled checkpoint does not sign over it: it says so and writes nothing.
    result = run_gapless(["chain", "checkpoint", "--key", str(tmp_path / "chain.key")], env)
    assert result.returncode == 1, result.stdout
    assert result.stderr.strip() == (
        f"gapless: acme/ABC/{head['period_key']}: number {head['last_number']} (5): the chain "
        f"no longer matches the checkpoint signed at {head['at']} ({checkpoint.name}) at seq 5; "
        "nothing signed: run gapless chain verify --public-key to see it")
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [checkpoint.name]
    tamper(db_url, "DELETE FROM chain_records", "DELETE FROM number_counters")
    assert chain_verify(gapless_env, db_url)[0] == 0
    result = run_gapless(signed, env)
    assert result.returncode == 1, result.stdout
    assert f"number {head['last_number']} (5): the chain is missing" in result.stdout
