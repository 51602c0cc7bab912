"""The tamper-evident chain of every counter (docs/chain.md): its canonical JSON, its hashes,
the verification of the chains stored in the database, and their export.

The database writes the chain (schema 0009: ``gapless_seal`` and the ``invoices_history_zchain``
trigger); this module only reads it, and recomputes every hash here, from the format, so a
verification never trusts the SQL that wrote the records.

An export is written to a new directory (0700, files 0600, never through a symbolic link) and
read back as hostile input: relative to its directory, never through a link, every size
bounded, JSON parsed bounded (:func:`read_json`), anything unexpected a one-line
:class:`MalformedExport`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from gapless.errors import GaplessError
from gapless.ledger.queries import chain as q

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from gapless.ledger.database import Database

VERSION = "gapless-chain/1"

#: The fields of a record, as hashed (every one present, null where it does not apply).
RECORD_FIELDS = ("seq", "kind", "tenant", "series", "period_key", "reserved_no", "number",
                 "invoice_id", "uuid", "message_sha256", "document_sha256", "ref",
                 "reason", "at", "migrated")
FINAL_KINDS = ("issued", "rejected", "voided")


class _Raw(str):
    """Text canonical_json writes as it is (punctuation, a serialised scalar)."""

    __slots__ = ()


def canonical_json(value: Any) -> str:
    """Canonical JSON (docs/chain.md): sorted keys, no spaces, minimal escapes, plain decimals.

    Iterative: no nesting depth can exhaust the interpreter's stack."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Raw:
            out.append(item)
        elif isinstance(item, dict):
            keys = sorted(item)
            stack.append(_Raw("}"))
            for n, k in enumerate(reversed(keys)):
                stack.append(item[k])
                stack.append(_Raw(("" if n == len(keys) - 1 else ",")
                                  + json.dumps(k, ensure_ascii=False) + ":"))
            out.append("{")
        elif isinstance(item, list | tuple):
            stack.append(_Raw("]"))
            for n, v in enumerate(reversed(item)):
                stack.append(v)
                if n != len(item) - 1:
                    stack.append(_Raw(","))
            out.append("[")
        else:
            out.append(_scalar(item))
    return "".join(out)


def _scalar(value: Any) -> str:
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
    raise TypeError(f"no canonical JSON for {type(value).__name__}")


def _plain_decimal(d: Decimal) -> str:
    """The exact value in plain notation, no trailing zeros (never rounded to a context's
    precision: ``Decimal.normalize`` would round to 28 digits)."""
    if not d.is_finite():
        raise ValueError("no canonical JSON for a number that is not finite")
    if d == 0:
        return "0"
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


# ------------------------------------------------------------------------ bounded JSON reading
#: Nesting deeper than this is refused (a message is at most 16 levels at intake).
MAX_JSON_DEPTH = 512
#: A number whose plain notation is longer than PostgreSQL's numeric can hold (131072 digits
#: before the point, 16383 after) is refused: ``1e999999999`` would be a gigabyte of digits.
MAX_NUMBER_CHARS = 131072 + 16383 + 2
#: All the numbers of one JSON text may expand to at most this many characters, canonically.
MAX_NUMBERS_CHARS = 16 * 1024 * 1024
_SURROGATE = re.compile("[\ud800-\udfff]")


class UnreadableJson(ValueError):
    """JSON text the chain's bounded reader refuses: not UTF-8 or not JSON, a repeated key,
    NaN, a lone surrogate, nesting deeper than MAX_JSON_DEPTH, or an oversized number."""


def _plain_size(d: Decimal) -> int:
    """How many characters ``_plain_decimal(d)`` writes, computed without writing them."""
    _, digits, exponent = d.as_tuple()
    if not isinstance(exponent, int):
        raise UnreadableJson("a number that is not finite")
    significant = len(digits)
    while significant and digits[significant - 1] == 0:
        significant -= 1
        exponent += 1
    if significant == 0:
        return 1
    if exponent >= 0:
        return 1 + significant + exponent
    return 2 + max(significant + exponent, 1) + (-exponent)


def _refuse_constant(name: str) -> Any:
    raise UnreadableJson(f"{name} is not a JSON number")


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise UnreadableJson("an object repeats a key")
        result[key] = value
    return result


def read_json(text: str | bytes, *, exact_numbers: bool = False) -> Any:
    """Parse JSON from an untrusted source, bounded: UTF-8, no repeated key, no NaN or
    Infinity, no lone surrogate, at most MAX_JSON_DEPTH levels, numbers within PostgreSQL's
    numeric (as exact Decimals, integers too with ``exact_numbers``; otherwise integers are
    ints). Raises UnreadableJson, never anything else."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise UnreadableJson("not UTF-8") from None
    budget = [MAX_NUMBERS_CHARS]

    def number(literal: str) -> Decimal:
        try:
            d = Decimal(literal)
        except InvalidOperation:  # pragma: no cover - the scanner passes only JSON numbers
            raise UnreadableJson("a number that is not a number") from None
        size = _plain_size(d)
        if size > MAX_NUMBER_CHARS:
            raise UnreadableJson(f"a number of more than {MAX_NUMBER_CHARS} digits")
        budget[0] -= size
        if budget[0] < 0:
            raise UnreadableJson(f"its numbers exceed {MAX_NUMBERS_CHARS} digits")
        return d

    def integer(literal: str) -> int:
        if len(literal) > 20:
            raise UnreadableJson("an integer of more than 19 digits")
        return int(literal)

    try:
        value = json.loads(text, object_pairs_hook=_no_repeated_keys,
                           parse_constant=_refuse_constant, parse_float=number,
                           parse_int=number if exact_numbers else integer)
    except UnreadableJson:
        raise
    except RecursionError:
        raise UnreadableJson(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise UnreadableJson(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError:
        raise UnreadableJson("not JSON") from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Depth at most MAX_JSON_DEPTH; no string (key or value) holds a lone surrogate (which
    UTF-8 cannot encode). Iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise UnreadableJson("a string holds a lone surrogate (not Unicode text)")
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise UnreadableJson(f"nested more than {MAX_JSON_DEPTH} levels deep")
            if isinstance(item, dict):
                stack.extend((k, depth) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)


def message_sha256(message_json: str) -> str:
    """The SHA-256 (hex) of a stored message's canonical JSON; numbers keep their exact value.
    Raises UnreadableJson for a text the bounded reader refuses."""
    message = read_json(message_json, exact_numbers=True)
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
    reserved_no: int | None  # None: no number can be named
    number: str | None
    reason: str
    #: A break of the chain's structure (a record missing between two others): it names the
    #: number of the record after the gap, but any other check's number comes first.
    structural: bool = False


def _first_break(breaks: Sequence[_Break]) -> _Break | None:
    """The smallest number some check fails on; a break no number can be named for only when
    there is no other."""
    named = [b for b in breaks if b.reserved_no is not None and not b.structural]
    if named:
        return min(named, key=lambda b: b.reserved_no or 0)
    structural = [b for b in breaks if b.reserved_no is not None]
    return next(iter(structural or breaks), None)


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
    before: Mapping[str, Any] | None = None
    for r in records:
        no = r["reserved_no"]
        report.counts[r["kind"]] += 1
        if r["migrated"]:
            report.counts["migrated"] += 1
        if r["seq"] != expected_seq:
            missing = (f"record seq {expected_seq} is missing" if r["seq"] == expected_seq + 1
                       else f"records seq {expected_seq} to {r['seq'] - 1} are missing")
            after = (f"seq {before['seq']} (number {before['number']})" if before is not None
                     else "the chain's start")
            breaks.append(_Break(no, r["number"], f"{missing}: removed between {after} and "
                                 f"seq {r['seq']} (number {r['number']}), whose link to the "
                                 "record before it is broken", structural=True))
        elif (r["version"] != VERSION
              or record_hash(r["version"], prev, r) != r["hash"]):
            breaks.append(_Break(no, r["number"], f"record seq {r['seq']} ({r['kind']}): its "
                                 "hash does not match its fields and the previous record"))
        expected_seq = r["seq"] + 1
        prev = r["hash"]
        before = r
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
    unsealed = 1  # the first number with no seal record: never a walk up to a claimed last_no
    while unsealed in seals:
        unsealed += 1
    if unsealed <= report.last_no:
        breaks.append(_Break(unsealed, None,
                             f"sealed (the counter is at {report.last_no}) but no seal record"))
    if max(seals, default=0) > report.last_no:
        top = max(seals)
        breaks.append(_Break(top, seals[top]["number"],
                             f"a seal record beyond the counter's last number {report.last_no}"))
    breaks.extend(_check_invoices(by_no, seals, message, final))
    first = _first_break(breaks)
    if first is not None:
        report.broken_no, report.broken_number, report.reason = \
            first.reserved_no, first.number or _printed(first.reserved_no, records, invoices), \
            first.reason
    return report


def _printed(no: int | None, records: Sequence[Mapping[str, Any]],
             invoices: Sequence[Mapping[str, Any]]) -> str | None:
    """The printed number of counter value ``no`` wherever the chain or an invoice gives it
    (None only when nothing does)."""
    for row in (*records, *invoices):
        if no is not None and row["reserved_no"] == no and isinstance(row["number"], str):
            return row["number"]
    return None


def _check_invoices(by_no: Mapping[int, Mapping[str, Any]],
                    seals: Mapping[int, Mapping[str, Any]], message: Mapping[int, str | None],
                    final: Mapping[int, Mapping[str, Any]]) -> list[_Break]:
    """Each numbered invoice against its seal, its message and its last final record."""
    breaks: list[_Break] = []
    for no, sealed in seals.items():
        if sealed["invoice_id"] is not None and no not in by_no:
            breaks.append(_Break(no, sealed["number"], f"sealed for invoice "
                                 f"{sealed['invoice_id']!r}, but no invoice holds this number "
                                 "(its row was deleted?)"))
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
        elif (held := _payload_sha256(inv)) != message.get(no):
            breaks.append(_Break(no, inv["number"], "the stored message is not the one sealed "
                                 + ("(its SHA-256 differs)" if held is not None else
                                    "(it cannot be read as JSON)")))
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


def _payload_sha256(inv: Mapping[str, Any]) -> str | None:
    """The SHA-256 of an invoice's stored message (``payload_sha256`` when its reader has
    computed it already); None for a message the bounded reader refuses."""
    if "payload_sha256" in inv:
        return inv["payload_sha256"]  # type: ignore[no-any-return]
    try:
        return message_sha256(inv["payload"])
    except UnreadableJson:
        return None


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
INVOICE_COLUMNS = ("tenant", "series", "period_key", "reserved_no", "number", "invoice_id",
                   "uuid", "status", "message", "document_sha256", "ref", "documents")
KINDS = ("seal", *FINAL_KINDS, "corrected")
_MiB = 1024 * 1024
#: The most an export's reader accepts (docs/chain.md, "Export"): anything larger is a
#: malformed export, refused before it is read.
MAX_MANIFEST_BYTES = 16 * _MiB
MAX_RECORD_LINE = 1 * _MiB
MAX_RECORDS_BYTES = 4096 * _MiB
MAX_INVOICE_LINE = 16 * _MiB
MAX_INVOICES_BYTES = 16384 * _MiB
MAX_DOCUMENT_BYTES = 64 * _MiB
MAX_BIGINT = 2**63 - 1
_SHA256_HEX = re.compile("[0-9a-f]{64}")


class MalformedExport(GaplessError):
    """A directory that is not what ``gapless chain export`` writes: a file missing, too large,
    a symbolic link or not a regular file, a line that is not the JSON object the format
    says, a document name that is not a SHA-256. Nothing outside the directory is read."""

    def __init__(self, what: str) -> None:
        super().__init__(f"malformed export: {what}")


class ExportDirectoryError(GaplessError):
    """``--out`` names something other than a new (or empty) directory: an export is never
    written over or beside other files, nor through a symbolic link."""


class UnsafeFile(ValueError):
    """A file the chain's readers refuse to open: a symbolic link, not a regular file, larger
    than its bound, or unreadable."""


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_regular(name: str | Path, limit: int, *, dir_fd: int | None = None) -> BinaryIO:
    """Open a file to read: never through a symbolic link (O_NOFOLLOW), never a device, FIFO
    or directory (and a FIFO does not block the open), at most ``limit`` bytes. Raises
    FileNotFoundError when it does not exist, UnsafeFile otherwise."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile("a symbolic link: not followed") from None
        raise UnsafeFile(f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile("not a regular file")
        if st.st_size > limit:
            raise UnsafeFile(f"{st.st_size} bytes, more than the {limit} accepted")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(name: str | Path, limit: int, *, dir_fd: int | None = None) -> bytes:
    """The bytes of a file opened by :func:`open_regular` (a file that grows past ``limit``
    while it is read is refused too)."""
    with open_regular(name, limit, dir_fd=dir_fd) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"more than the {limit} bytes accepted")
    return data


def open_directory(name: str | Path, *, dir_fd: int | None = None) -> int | None:
    """A directory's descriptor, never through a symbolic link; None when there is none.
    Raises UnsafeFile for a symbolic link or another kind of file."""
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux: ENOTDIR for a link too
            link = stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
            raise UnsafeFile("a symbolic link: not followed" if link
                             else "not a directory") from None
        raise UnsafeFile(f"cannot be read ({exc.strerror})") from None


def new_export_directory(out: Path) -> int:
    """Make ``out`` (mode 0700; its missing parents too) and return its descriptor. An
    existing directory is taken only when it is empty, not a symbolic link, and owned by this
    user (its mode then becomes 0700); anything else raises ExportDirectoryError."""
    out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.mkdir(out, 0o700)
    except FileExistsError:
        st = os.lstat(out)
        if stat.S_ISLNK(st.st_mode):
            raise ExportDirectoryError(f"{out} is a symbolic link; an export is written to a "
                                       "new directory") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ExportDirectoryError(f"{out} exists and is not a directory; an export is "
                                       "written to a new directory") from None
        if st.st_uid != os.geteuid():
            raise ExportDirectoryError(f"{out} belongs to another user; an export is written "
                                       "to a new directory") from None
    try:
        fd = os.open(out, _DIRECTORY_FLAGS)
    except OSError as exc:
        raise ExportDirectoryError(f"{out}: cannot open the directory ({exc.strerror})") from None
    try:
        if os.listdir(fd):
            raise ExportDirectoryError(f"{out} exists and is not empty; an export is written "
                                       "to a new directory")
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _create(name: str, dir_fd: int) -> BinaryIO:
    """A new file (mode 0600) in a directory: never an existing name, never through a
    symbolic link."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


def _subdirectory(name: str, dir_fd: int) -> int:
    """A new directory (mode 0700) in a directory, and its descriptor."""
    os.mkdir(name, 0o700, dir_fd=dir_fd)
    fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    os.fchmod(fd, 0o700)
    return fd


def _jsonl(row: Mapping[str, Any]) -> bytes:
    """One line of an export: JSON with every non-ASCII character escaped, so that the line
    holds no LINE SEPARATOR, PARAGRAPH SEPARATOR or NEXT LINE a reader could split on."""
    return (json.dumps(row, ensure_ascii=True) + "\n").encode("ascii")


async def export(db: Database, out: int, *, tenant: str | None = None,
                 series: str | None = None,
                 checkpoints: Sequence[tuple[str, bytes]] = ()) -> dict[str, Any]:
    """Write the chains in scope into the directory ``out`` (a descriptor from
    :func:`new_export_directory`; docs/chain.md, "Export"): manifest.json (with the scope),
    records.jsonl, invoices.jsonl, documents/<sha256> and the ``checkpoints`` given (name,
    bytes) into checkpoints/; files 0600, directories 0700; returns the manifest."""
    counters, records, invoices, bodies = await _read(db, tenant, series)
    documents = _subdirectory("documents", out)
    by_pk: dict[int, list[str]] = defaultdict(list)
    try:
        for pk, body in bodies:
            name = hashlib.sha256(body).hexdigest()
            if name not in by_pk[pk]:
                by_pk[pk].append(name)
            try:
                with _create(name, documents) as f:
                    f.write(body)
            except FileExistsError:  # the same bytes stored for another invoice
                pass
    finally:
        os.close(documents)
    hashes = {}
    with _create("records.jsonl", out) as f:
        digest = hashlib.sha256()
        for r in records:
            line = _jsonl({k: r[k] for k in RECORD_COLUMNS})
            digest.update(line)
            f.write(line)
        hashes["records.jsonl"] = digest.hexdigest()
    with _create("invoices.jsonl", out) as f:
        digest = hashlib.sha256()
        for inv in sorted(invoices, key=lambda i: (i["tenant"], i["series"], i["period_key"],
                                                   i["reserved_no"])):
            line = _jsonl({
                "tenant": inv["tenant"], "series": inv["series"],
                "period_key": inv["period_key"], "reserved_no": inv["reserved_no"],
                "number": inv["number"], "invoice_id": inv["invoice_id"], "uuid": inv["uuid"],
                "status": inv["status"], "message": inv["payload"],
                "document_sha256": inv["document_sha256"], "ref": inv["integrator_ref"],
                "documents": sorted(by_pk[inv["id"]])})
            digest.update(line)
            f.write(line)
        hashes["invoices.jsonl"] = digest.hexdigest()
    if checkpoints:
        directory = _subdirectory("checkpoints", out)
        try:
            for name, data in checkpoints:
                with _create(name, directory) as f:
                    f.write(data)
        finally:
            os.close(directory)
    manifest = {
        "format": EXPORT_FORMAT,
        "scope": {"tenant": tenant, "series": series},
        "chains": [{"tenant": c["tenant"], "series": c["series"], "period_key": c["period_key"],
                    "last_no": c["last_no"], "head_seq": c["chain_seq"],
                    "head_hash": c["chain_hash"]} for c in counters],
        "files": hashes,
    }
    with _create("manifest.json", out) as f:
        f.write((json.dumps(manifest, indent=2, ensure_ascii=True) + "\n").encode("ascii"))
    return manifest


# ----------------------------------------------------------------- reading an export (hostile)
_STR = (str,)
_OPT_STR = (str, type(None))
_INT = (int,)
_BOOL = (bool,)
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "version": _STR, "seq": _INT, "kind": _STR, "tenant": _STR, "series": _STR,
    "period_key": _STR, "reserved_no": _INT, "number": _STR, "invoice_id": _OPT_STR,
    "uuid": _OPT_STR, "message_sha256": _OPT_STR, "document_sha256": _OPT_STR, "ref": _OPT_STR,
    "reason": _OPT_STR, "at": _STR, "migrated": _BOOL, "hash": _STR}
_INVOICE_TYPES: dict[str, tuple[type, ...]] = {
    "tenant": _STR, "series": _STR, "period_key": _STR, "reserved_no": _INT, "number": _STR,
    "invoice_id": _STR, "uuid": _OPT_STR, "status": _STR, "message": _STR,
    "document_sha256": _OPT_STR, "ref": _OPT_STR, "documents": (list,)}
_CHAIN_TYPES: dict[str, tuple[type, ...]] = {
    "tenant": _STR, "series": _STR, "period_key": _STR, "last_no": _INT, "head_seq": _INT,
    "head_hash": _OPT_STR}
_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "format": _STR, "scope": (dict,), "chains": (list,), "files": (dict,)}


def _typed(value: Any, types: Mapping[str, tuple[type, ...]], where: str,
           *, least: int = 0) -> dict[str, Any]:
    """``value`` as an object with exactly the keys of ``types``, each of its type (a bool is
    not an integer; integers within ``least``..2^63-1)."""
    if not isinstance(value, dict):
        raise MalformedExport(f"{where}: not a JSON object")
    if set(value) != set(types):
        missing = sorted(set(types) - set(value))
        extra = sorted(set(value) - set(types))
        raise MalformedExport(f"{where}: " + (f"missing key {_short(missing[0])}" if missing
                                              else f"unknown key {_short(extra[0])}"))
    for key, kinds in types.items():
        item = value[key]
        if type(item) not in kinds:
            raise MalformedExport(f"{where}: {key} is not "
                                  + " or ".join(_TYPE_NAMES[k] for k in kinds))
        if type(item) is int and not least <= item <= MAX_BIGINT:
            raise MalformedExport(f"{where}: {key} {item} is out of range")
    return value


def _short(text: str) -> str:
    """A value from an export in a message: quoted, escaped (repr), at most 40 characters."""
    return repr(text[:40]) + ("…" if len(text) > 40 else "")


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", dict: "an object",
               list: "an array", type(None): "null"}


def _parse(data: bytes, where: str, *, exact_numbers: bool = False) -> Any:
    try:
        return read_json(data, exact_numbers=exact_numbers)
    except UnreadableJson as exc:
        raise MalformedExport(f"{where}: {exc}") from None


def _lines(f: BinaryIO, name: str, max_line: int, max_total: int
           ) -> Iterator[tuple[str, bytes]]:
    """The lines of a JSON-lines file, split on LF only (each at most ``max_line`` bytes, all
    at most ``max_total``), as (where, bytes); blank lines are skipped."""
    total = 0
    number = 0
    while True:
        line = f.readline(max_line + 1)
        if not line:
            return
        number += 1
        total += len(line)
        if len(line) > max_line:
            raise MalformedExport(f"{name} line {number}: longer than {max_line} bytes")
        if total > max_total:
            raise MalformedExport(f"{name}: more than {max_total} bytes")
        line = line.removesuffix(b"\n")
        if line:
            yield f"{name} line {number}", line


def _open_in_export(name: str, limit: int, dir_fd: int) -> BinaryIO:
    try:
        return open_regular(name, limit, dir_fd=dir_fd)
    except FileNotFoundError:
        raise MalformedExport(f"{name} is missing") from None
    except UnsafeFile as exc:
        raise MalformedExport(f"{name}: {exc}") from None


def _read_manifest(root: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with _open_in_export("manifest.json", MAX_MANIFEST_BYTES, root) as f:
        data = f.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise MalformedExport(f"manifest.json: more than {MAX_MANIFEST_BYTES} bytes")
    manifest = _parse(data, "manifest.json")
    if isinstance(manifest, dict) and manifest.get("format") != EXPORT_FORMAT:
        raise MalformedExport(f"manifest.json: not a {EXPORT_FORMAT} export")
    _typed(manifest, _MANIFEST_TYPES, "manifest.json")
    scope = _typed(manifest["scope"], {"tenant": _OPT_STR, "series": _OPT_STR},
                   "manifest.json scope")
    counters = []
    seen: set[tuple[str, str, str]] = set()
    for n, c in enumerate(manifest["chains"], start=1):
        _typed(c, _CHAIN_TYPES, f"manifest.json chain {n}")
        key = (c["tenant"], c["series"], c["period_key"])
        if key in seen:
            raise MalformedExport(f"manifest.json chain {n}: listed twice")
        seen.add(key)
        counters.append({"tenant": c["tenant"], "series": c["series"],
                         "period_key": c["period_key"], "last_no": c["last_no"],
                         "chain_seq": c["head_seq"], "chain_hash": c["head_hash"]})
    return scope, counters


def _read_records(root: int) -> list[dict[str, Any]]:
    """records.jsonl, by chain and seq: the records of a chain are one run of lines, their
    seq increasing (a gap is the chain's to report: a removed record); lines in another order
    are a malformed export."""
    records: list[dict[str, Any]] = []
    done: set[tuple[str, str, str]] = set()
    current: tuple[str, str, str] | None = None
    last_seq = 0
    with _open_in_export("records.jsonl", MAX_RECORDS_BYTES, root) as f:
        for where, line in _lines(f, "records.jsonl", MAX_RECORD_LINE, MAX_RECORDS_BYTES):
            r = _typed(_parse(line, where), _RECORD_TYPES, where, least=1)
            if r["kind"] not in KINDS:
                raise MalformedExport(f"{where}: kind {_short(r['kind'])} is not one of "
                                      + ", ".join(KINDS))
            key = (r["tenant"], r["series"], r["period_key"])
            if key != current:
                if key in done:
                    raise MalformedExport(f"{where}: the records of a chain are not one run "
                                          "of lines")
                if current is not None:
                    done.add(current)
                current, last_seq = key, 0
            if r["seq"] <= last_seq:
                raise MalformedExport(f"{where}: seq {r['seq']} after seq {last_seq}: the "
                                      "records of a chain are in seq order")
            last_seq = r["seq"]
            records.append(r)
    return records


def _read_invoices(root: int) -> list[dict[str, Any]]:
    """invoices.jsonl, each message hashed (bounded) and each stored document's SHA-256
    recomputed from documents/<name> (read once per name; never a name that is not a SHA-256,
    never through a symbolic link)."""
    invoices: list[dict[str, Any]] = []
    held: set[tuple[str, str, str, int]] = set()
    try:
        documents = open_directory("documents", dir_fd=root)
    except UnsafeFile as exc:
        raise MalformedExport(f"documents/: {exc}") from None
    hashed: dict[str, str | None] = {}
    try:
        with _open_in_export("invoices.jsonl", MAX_INVOICES_BYTES, root) as f:
            for where, line in _lines(f, "invoices.jsonl", MAX_INVOICE_LINE,
                                      MAX_INVOICES_BYTES):
                inv = _typed(_parse(line, where), _INVOICE_TYPES, where, least=1)
                key = (inv["tenant"], inv["series"], inv["period_key"], inv["reserved_no"])
                if key in held:
                    raise MalformedExport(f"{where}: a second invoice holds number "
                                          f"{inv['reserved_no']} of its chain")
                held.add(key)
                try:
                    payload_sha256 = message_sha256(inv["message"])
                except UnreadableJson as exc:
                    raise MalformedExport(f"{where}: message: {exc}") from None
                names = inv["documents"]
                for name in names:
                    if not isinstance(name, str) or not _SHA256_HEX.fullmatch(name):
                        raise MalformedExport(f"{where}: a document name that is not a "
                                              "SHA-256 (64 lowercase hex digits)")
                    if name not in hashed:
                        hashed[name] = _document_sha256(documents, name)
                invoices.append({
                    "id": where, "tenant": inv["tenant"], "series": inv["series"],
                    "period_key": inv["period_key"], "reserved_no": inv["reserved_no"],
                    "number": inv["number"], "invoice_id": inv["invoice_id"],
                    "uuid": inv["uuid"], "status": inv["status"],
                    "payload_sha256": payload_sha256,
                    "document_sha256": inv["document_sha256"], "integrator_ref": inv["ref"],
                    "documents": {h for n in names if (h := hashed[n]) is not None}})
    finally:
        if documents is not None:
            os.close(documents)
    return invoices


def _document_sha256(documents: int | None, name: str) -> str | None:
    """The SHA-256 of documents/<name>, read in chunks; None when it is missing."""
    if documents is None:
        return None
    try:
        f = open_regular(name, MAX_DOCUMENT_BYTES, dir_fd=documents)
    except FileNotFoundError:
        return None
    except UnsafeFile as exc:
        raise MalformedExport(f"documents/{name}: {exc}") from None
    digest = hashlib.sha256()
    size = 0
    with f:
        while chunk := f.read(_MiB):
            size += len(chunk)
            if size > MAX_DOCUMENT_BYTES:
                raise MalformedExport(f"documents/{name}: more than {MAX_DOCUMENT_BYTES} bytes")
            digest.update(chunk)
    return digest.hexdigest()


def export_checkpoints(directory: Path) -> Path | None:
    """The export's own checkpoints/ directory, if it has one (never a symbolic link)."""
    try:
        st = os.lstat(directory / "checkpoints")
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        raise MalformedExport("checkpoints/: "
                              + ("a symbolic link: not followed" if stat.S_ISLNK(st.st_mode)
                                 else "not a directory"))
    return directory / "checkpoints"


def verify_export(directory: Path, heads: Sequence[SignedHead] = (), *,
                  tenant: str | None = None, series: str | None = None) -> list[ChainReport]:
    """Verify an export with no database: the same checks, the documents' hashes recomputed
    from the files' bytes; the signed ``heads`` of the chains in scope too: ``tenant`` and
    ``series`` when given (the auditor's), else the scope the export states. Every chain, record
    and invoice of the export must lie within the scope it states (a scope claimed narrower
    than what the export holds could otherwise leave signed heads unchecked).

    The export is hostile input: raises MalformedExport (one line) for anything that is not
    what ``gapless chain export`` writes, reads nothing outside ``directory``, and holds at
    most the bounded files in memory, whatever the export claims (docs/chain.md, "Export")."""
    try:
        root = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise MalformedExport(f"{directory}: cannot open the directory ({exc.strerror})"
                              ) from None
    try:
        scope, counters = _read_manifest(root)
        records = _read_records(root)
        invoices = _read_invoices(root)
    finally:
        os.close(root)
    for what, rows in (("manifest.json: a chain", counters), ("records.jsonl: a record", records),
                       ("invoices.jsonl: an invoice", invoices)):
        for row in rows:
            if (scope["tenant"] is not None and row["tenant"] != scope["tenant"]) or (
                    scope["series"] is not None and row["series"] != scope["series"]):
                raise MalformedExport(f"{what} outside the scope the manifest states")
    documents = {inv["id"]: inv.pop("documents") for inv in invoices}
    return verify_all(counters, records, invoices, documents,
                      in_scope(heads, scope["tenant"] if tenant is None else tenant,
                               scope["series"] if series is None else series))
