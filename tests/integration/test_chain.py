"""The tamper-evident chain (docs/chain.md, invariant I8) on a real run: the worker, the mock
integrator with faults, rejections, a corrected retry, returns and voids; then ``gapless chain
verify`` and a verifier written here from docs/chain.md alone (no gapless import: plain SQL and
hashlib) must agree — on the clean chain and on every kind of tampering, naming the same number.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gapless.numbering import add_series, build_series_spec
from gapless.settings import Settings
from tests.conftest import create_database, database_url, drop_database
from tests.helpers import await_until, run_gapless, today
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
    async with engine.begin() as conn:
        await add_series(conn, build_series_spec("acme", "ABC"))
        await add_series(conn, build_series_spec("acme", "XYZ"))
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
    frozen = f"{db_name}_frozen"
    create_database(frozen, template=db_name)
    return {"db": db_name, "env": env, "statuses": statuses, "frozen": frozen}


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
    async with engine.begin() as conn:
        await add_series(conn, build_series_spec("acme", "ABC"))
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
    from gapless.migrations import downgrade, migrate

    downgrade(db_url, "0008")
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
