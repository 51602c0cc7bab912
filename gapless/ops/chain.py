"""The tamper-evident chain of every counter (docs/chain.md): its canonical JSON, its hashes,
and the verification of the chains stored in the database.

The database writes the chain (schema 0009: ``gapless_seal`` and the ``invoices_history_zchain``
trigger); this module only reads it, and recomputes every hash here, from the format, so a
verification never trusts the SQL that wrote the records.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gapless.ledger.queries import chain as q

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from gapless.ledger.database import Database

VERSION = "gapless-chain/1"

#: The fields of a record, as hashed (every one present, null where it does not apply).
RECORD_FIELDS = ("seq", "kind", "tenant", "series", "period_key", "reserved_no", "number",
                 "invoice_id", "uuid", "message_sha256", "document_sha256", "ref",
                 "reason", "at", "migrated")
FINAL_KINDS = ("issued", "rejected", "voided")


def canonical_json(value: Any) -> str:
    """Canonical JSON (docs/chain.md): sorted keys, no spaces, minimal escapes, plain decimals."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal | float):
        return _plain_decimal(Decimal(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{canonical_json(value[k])}"
                              for k in sorted(value)) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise TypeError(f"no canonical JSON for {type(value).__name__}")


def _plain_decimal(d: Decimal) -> str:
    # Trailing zeros trimmed from the exact text, as PostgreSQL's trim_scale does: normalize()
    # would round to the context's 28 digits first, and a message's number may have more.
    if d == 0:
        return "0"
    text = format(d, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def message_sha256(message_json: str) -> str:
    """The SHA-256 (hex) of a stored message's canonical JSON; numbers keep their exact value."""
    message = json.loads(message_json, parse_float=Decimal)
    return hashlib.sha256(canonical_json(message).encode()).hexdigest()


def genesis(tenant: str, series: str, period_key: str) -> str:
    """The "previous hash" of a chain's first record."""
    body = canonical_json({"tenant": tenant, "series": series, "period_key": period_key})
    return hashlib.sha256(f"{VERSION}\n{body}".encode()).hexdigest()


def record_hash(version: str, prev: str, record: Mapping[str, Any]) -> str:
    """hash = hex(SHA-256(version LF prev LF canonical(record)))."""
    body = canonical_json({name: record[name] for name in RECORD_FIELDS})
    return hashlib.sha256(f"{version}\n{prev}\n{body}".encode()).hexdigest()


@dataclass(frozen=True)
class SignedHead:
    """One chain's head as a checkpoint whose signature verified says it was at ``at``
    (gapless.ops.checkpoints reads them; docs/chain.md, "Checkpoints")."""

    checkpoint: str  # the checkpoint's file name
    at: str          # when it was signed, UTC, as in the checkpoint
    tenant: str
    series: str
    period_key: str
    last_no: int
    last_number: str | None
    head_seq: int
    head_hash: str

    @property
    def chain(self) -> tuple[str, str, str]:
        return self.tenant, self.series, self.period_key


@dataclass
class ChainReport:
    """One counter's chain: its extent, head, record counts, the first break (if any), and
    against the signed checkpoints given: the latest one it matches (``anchor``) and the first
    one it no longer matches (``checkpoint_reason``)."""

    tenant: str
    series: str
    period_key: str
    last_no: int
    first_number: str | None = None
    last_number: str | None = None
    head_seq: int = 0
    head_hash: str | None = None
    counts: Counter[str] = field(default_factory=Counter)
    broken_no: int | None = None
    broken_number: str | None = None
    reason: str | None = None
    anchor: SignedHead | None = None
    checkpoint_no: int | None = None
    checkpoint_number: str | None = None
    checkpoint_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None and self.checkpoint_reason is None


@dataclass
class _Break:
    reserved_no: int | None  # None: no number can be named (a structural break)
    number: str | None
    reason: str


def _first_break(breaks: Sequence[_Break]) -> _Break | None:
    """The smallest number some check fails on; a break no number can be named for only when
    there is no other."""
    named = [b for b in breaks if b.reserved_no is not None]
    if named:
        return min(named, key=lambda b: b.reserved_no or 0)
    return breaks[0] if breaks else None


def verify_chain(counter: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                 invoices: Sequence[Mapping[str, Any]],
                 documents: Mapping[Any, set[str]]) -> ChainReport:
    """Check one counter's chain against its head, its invoices and their documents
    (docs/chain.md, "What gapless chain verify checks")."""
    tenant, series, period = counter["tenant"], counter["series"], counter["period_key"]
    report = ChainReport(tenant, series, period, counter["last_no"],
                         head_seq=counter["chain_seq"], head_hash=counter["chain_hash"])
    breaks: list[_Break] = []
    by_no = {inv["reserved_no"]: inv for inv in invoices}
    seals: dict[int, Mapping[str, Any]] = {}
    message: dict[int, str | None] = {}
    final: dict[int, Mapping[str, Any]] = {}
    prev = genesis(tenant, series, period)
    expected_seq = 1
    expected_no = 1
    for r in records:
        no = r["reserved_no"]
        report.counts[r["kind"]] += 1
        if r["migrated"]:
            report.counts["migrated"] += 1
        if r["seq"] != expected_seq:
            breaks.append(_Break(None, None, f"record seq {expected_seq} is missing "
                                             f"(the next is seq {r['seq']})"))
        elif (r["version"] != VERSION
              or record_hash(r["version"], prev, r) != r["hash"]):
            breaks.append(_Break(no, r["number"], f"record seq {r['seq']} ({r['kind']}): its "
                                 "hash does not match its fields and the previous record"))
        expected_seq = r["seq"] + 1
        prev = r["hash"]
        if r["kind"] == "seal":
            if no != expected_no:
                missing = min(no, expected_no)
                breaks.append(_Break(missing, None if missing != no else r["number"],
                                     f"seal records out of order: seq {r['seq']} seals number "
                                     f"{no} where number {expected_no} was due"))
            expected_no = max(expected_no, no) + 1
            if no in seals:
                breaks.append(_Break(no, r["number"], "sealed twice in the chain"))
            seals[no] = r
            message[no] = r["message_sha256"]
            report.first_number = report.first_number or r["number"]
            report.last_number = r["number"]
            continue
        seal = seals.get(no)
        if seal is None or (seal["invoice_id"], seal["uuid"], seal["number"]) != \
                (r["invoice_id"], r["uuid"], r["number"]):
            breaks.append(_Break(no, r["number"], f"record seq {r['seq']} ({r['kind']}) does not "
                                 "follow a seal record of its number and invoice"))
        if r["kind"] == "corrected":
            message[no] = r["message_sha256"]
        else:
            final[no] = r
            inv = by_no.get(no)
            if r["kind"] == "issued" and r["document_sha256"] is not None and (
                    inv is None or r["document_sha256"] not in documents.get(inv["id"], set())):
                breaks.append(_Break(no, r["number"], "the document recorded as issued is not "
                                     "among the invoice's stored documents (bytes changed?)"))
    if records and (report.head_seq != records[-1]["seq"]
                    or report.head_hash != records[-1]["hash"]):
        breaks.append(_Break(records[-1]["reserved_no"], records[-1]["number"],
                             f"the head (seq {report.head_seq}) is not the chain's last record "
                             f"(seq {records[-1]['seq']}): records removed or added at the end"))
    elif not records and report.head_seq:
        breaks.append(_Break(None, None, f"the head says seq {report.head_seq}, no record"))
    unsealed = [no for no in range(1, report.last_no + 1) if no not in seals]
    if unsealed:
        inv = by_no.get(unsealed[0])
        breaks.append(_Break(unsealed[0], inv["number"] if inv else None,
                             f"sealed (the counter is at {report.last_no}) but no seal record"))
    if max(seals, default=0) > report.last_no:
        top = max(seals)
        breaks.append(_Break(top, seals[top]["number"],
                             f"a seal record beyond the counter's last number {report.last_no}"))
    breaks.extend(_check_invoices(by_no, seals, message, final))
    first = _first_break(breaks)
    if first is not None:
        report.broken_no, report.broken_number, report.reason = \
            first.reserved_no, first.number, first.reason
    return report


def _check_invoices(by_no: Mapping[int, Mapping[str, Any]],
                    seals: Mapping[int, Mapping[str, Any]], message: Mapping[int, str | None],
                    final: Mapping[int, Mapping[str, Any]]) -> list[_Break]:
    """Each numbered invoice against its seal, its message and its last final record."""
    breaks: list[_Break] = []
    for no, inv in sorted(by_no.items()):
        seal = seals.get(no)
        if seal is None:
            breaks.append(_Break(no, inv["number"], "the invoice holds this number, "
                                 "the chain has no seal record of it"))
            continue
        if (seal["invoice_id"], seal["uuid"], seal["number"]) != \
                (inv["invoice_id"], inv["uuid"], inv["number"]):
            breaks.append(_Break(no, inv["number"], f"held by invoice {inv['invoice_id']!r}, "
                                 f"sealed for {seal['invoice_id']!r} (numbers swapped?)"))
        elif message_sha256(inv["payload"]) != message.get(no):
            breaks.append(_Break(no, inv["number"], "the stored message is not the one sealed "
                                 "(its SHA-256 differs)"))
        status = inv["status"]
        if status.lower() not in FINAL_KINDS:
            continue
        last = final.get(no)
        if last is None or last["kind"] != status.lower():
            breaks.append(_Break(no, inv["number"], f"{status}, but its last final record is "
                                 f"{last['kind'] if last else 'missing'}"))
        elif status == "ISSUED" and (last["document_sha256"], last["ref"]) != \
                (inv["document_sha256"], inv["integrator_ref"]):
            breaks.append(_Break(no, inv["number"], "ISSUED with another document or reference "
                                 "than its issued record"))
    return breaks


_Rows = list[dict[str, Any]]


async def _read(db: Database, tenant: str | None, series: str | None
                ) -> tuple[_Rows, _Rows, _Rows, list[tuple[int, bytes]]]:
    """Counters, records, numbered invoices and their documents (pk, bytes), one snapshot
    (REPEATABLE READ, READ ONLY; no lock)."""
    params = {"tenant": tenant, "series": series}
    async with db.snapshot() as snap:
        counters = [r._asdict() for r in await snap.all(q.COUNTERS, params)]
        records = [r._asdict() for r in await snap.all(q.RECORDS, params)]
        invoices = [r._asdict() for r in await snap.all(q.INVOICES, params)]
        documents = [(row.invoice_pk, bytes(row.body))
                     for row in await snap.all(q.DOCUMENTS, params)]
    return counters, records, invoices, documents


def verify_all(counters: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]],
               invoices: Sequence[Mapping[str, Any]], documents: Mapping[Any, set[str]],
               heads: Sequence[SignedHead] = ()) -> list[ChainReport]:
    """Every chain of ``counters`` (and any records of a counter not among them); ``documents``
    maps an invoice's ``id`` to the SHA-256 of each of its stored documents, recomputed.

    ``heads``, from checkpoints whose signatures verified, are checked against the chains: the
    record at each signed ``head_seq`` must carry the signed hash (a chain that has grown since
    is fine), and a signed chain must still exist."""
    by_chain: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        by_chain[r["tenant"], r["series"], r["period_key"]].append(r)
    inv_by_chain: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for inv in invoices:
        inv_by_chain[inv["tenant"], inv["series"], inv["period_key"]].append(inv)
    reports = [verify_chain(c, by_chain[key], inv_by_chain[key], documents)
               for c in counters
               for key in [(c["tenant"], c["series"], c["period_key"])]]
    known = {(c["tenant"], c["series"], c["period_key"]) for c in counters}
    for key in sorted(set(by_chain) - known):  # records of a counter that does not exist
        orphan = ChainReport(*key, last_no=0, head_seq=len(by_chain[key]))
        first = by_chain[key][0]
        orphan.broken_no, orphan.broken_number = first["reserved_no"], first["number"]
        orphan.reason = "chain records of a counter that does not exist"
        reports.append(orphan)
    if heads:
        _check_heads(reports, by_chain, heads)
    return reports


def _check_heads(reports: list[ChainReport],
                 records: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
                 heads: Sequence[SignedHead]) -> None:
    """Each chain against the heads signed for it, oldest checkpoint first: the latest one it
    matches becomes its anchor; the first one it does not match is its checkpoint break (a
    record at or before that seq was changed, removed or inserted, however consistently the
    hashes after it were recomputed). A signed chain with no report is a missing chain."""
    signed: dict[tuple[str, str, str], list[SignedHead]] = defaultdict(list)
    for head in sorted(heads, key=lambda h: (h.at, h.checkpoint)):
        signed[head.chain].append(head)
    by_chain = {(r.tenant, r.series, r.period_key): r for r in reports}
    for key in sorted(set(signed) - set(by_chain)):
        first = signed[key][0]
        missing = ChainReport(*key, last_no=0)
        missing.checkpoint_no, missing.checkpoint_number = first.last_no, first.last_number
        missing.checkpoint_reason = (
            f"the chain is missing: the checkpoint signed at {first.at} ({first.checkpoint}) "
            f"holds it up to seq {first.head_seq}")
        reports.append(missing)
    for key, report in by_chain.items():
        hashes = {r["seq"]: r["hash"] for r in records.get(key, ())}
        for head in signed.get(key, ()):
            if hashes.get(head.head_seq) == head.head_hash:
                report.anchor = head
                continue
            report.checkpoint_no, report.checkpoint_number = head.last_no, head.last_number
            since = (f"; the checkpoint signed at {report.anchor.at} still matches up to seq "
                     f"{report.anchor.head_seq} (number {report.anchor.last_number}), so the "
                     "change is after it" if report.anchor is not None else "")
            if head.head_seq not in hashes:
                report.checkpoint_reason = (
                    f"the chain is shorter than the checkpoint signed at {head.at} "
                    f"({head.checkpoint}): it ends at seq {max(hashes, default=0)}, the "
                    f"checkpoint signed seq {head.head_seq}: records removed{since}")
            else:
                report.checkpoint_reason = (
                    f"the chain no longer matches the checkpoint signed at {head.at} "
                    f"({head.checkpoint}): its record seq {head.head_seq} hashes to "
                    f"{hashes[head.head_seq][:16]}…, the checkpoint signed {head.head_hash[:16]}…: "
                    f"a record at or before it was changed, removed or inserted{since}")
            break


def in_scope(heads: Sequence[SignedHead], tenant: str | None,
             series: str | None) -> list[SignedHead]:
    """The signed heads of the chains a verification of (tenant, series) covers."""
    return [h for h in heads if (tenant is None or h.tenant == tenant)
            and (series is None or h.series == series)]


async def verify(db: Database, *, tenant: str | None = None,
                 series: str | None = None,
                 heads: Sequence[SignedHead] = ()) -> list[ChainReport]:
    """Verify every chain in scope from one snapshot, and against the signed ``heads`` in
    scope; one report per counter (and per signed chain that is missing)."""
    counters, records, invoices, bodies = await _read(db, tenant, series)
    documents: dict[Any, set[str]] = defaultdict(set)
    for pk, body in bodies:
        documents[pk].add(hashlib.sha256(body).hexdigest())
    return verify_all(counters, records, invoices, documents,
                      in_scope(heads, tenant, series))


# ---------------------------------------------------------------- export and offline verify
EXPORT_FORMAT = "gapless-chain-export/1"
RECORD_COLUMNS = ("version", *RECORD_FIELDS, "hash")


async def export(db: Database, out: Path, *, tenant: str | None = None,
                 series: str | None = None) -> dict[str, Any]:
    """Write the chains in scope to ``out`` (docs/chain.md, "Export"): manifest.json (with the
    scope), records.jsonl, invoices.jsonl and documents/<sha256>; returns the manifest."""
    counters, records, invoices, bodies = await _read(db, tenant, series)
    (out / "documents").mkdir(parents=True, exist_ok=True)
    by_pk: dict[int, list[str]] = defaultdict(list)
    for pk, body in bodies:
        name = hashlib.sha256(body).hexdigest()
        (out / "documents" / name).write_bytes(body)
        by_pk[pk].append(name)
    with (out / "records.jsonl").open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps({k: r[k] for k in RECORD_COLUMNS}, ensure_ascii=False) + "\n")
    with (out / "invoices.jsonl").open("w", encoding="utf-8") as f:
        for inv in sorted(invoices, key=lambda i: (i["tenant"], i["series"], i["period_key"],
                                                   i["reserved_no"])):
            f.write(json.dumps({
                "tenant": inv["tenant"], "series": inv["series"],
                "period_key": inv["period_key"], "reserved_no": inv["reserved_no"],
                "number": inv["number"], "invoice_id": inv["invoice_id"], "uuid": inv["uuid"],
                "status": inv["status"], "message": inv["payload"],
                "document_sha256": inv["document_sha256"], "ref": inv["integrator_ref"],
                "documents": sorted(by_pk[inv["id"]])}, ensure_ascii=False) + "\n")
    manifest = {
        "format": EXPORT_FORMAT,
        "scope": {"tenant": tenant, "series": series},
        "chains": [{"tenant": c["tenant"], "series": c["series"], "period_key": c["period_key"],
                    "last_no": c["last_no"], "head_seq": c["chain_seq"],
                    "head_hash": c["chain_hash"]} for c in counters],
        "files": {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                  for name in ("records.jsonl", "invoices.jsonl")},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    return manifest


def verify_export(directory: Path, heads: Sequence[SignedHead] = ()) -> list[ChainReport]:
    """Verify an export with no database: the same checks, the documents' hashes recomputed
    from the files' bytes; the signed ``heads`` of the chains in the export's scope too."""
    manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("format") != EXPORT_FORMAT:
        raise ValueError(f"{directory}: not a {EXPORT_FORMAT} export")
    scope = manifest.get("scope") or {}
    counters = [{"tenant": c["tenant"], "series": c["series"], "period_key": c["period_key"],
                 "last_no": c["last_no"], "chain_seq": c["head_seq"],
                 "chain_hash": c["head_hash"]} for c in manifest["chains"]]
    records = [json.loads(line) for line in
               (directory / "records.jsonl").read_text(encoding="utf-8").splitlines() if line]
    invoices = []
    documents: dict[Any, set[str]] = defaultdict(set)
    for line in (directory / "invoices.jsonl").read_text(encoding="utf-8").splitlines():
        if not line:
            continue
        inv = json.loads(line)
        inv["id"], inv["payload"], inv["integrator_ref"] = \
            inv["invoice_id"], inv["message"], inv["ref"]
        for name in inv["documents"]:
            path = directory / "documents" / name
            if path.is_file():
                documents[inv["id"]].add(hashlib.sha256(path.read_bytes()).hexdigest())
        invoices.append(inv)
    return verify_all(counters, records, invoices, documents,
                      in_scope(heads, scope.get("tenant"), scope.get("series")))
