"""The audit: is every counter gap-free and every number on exactly one invoice (I1–I3), where did
each number that is not ISSUED go, does the integrator agree with the ISSUED set (I7), and does
every chain verify, against the signed checkpoints when given (I8)? It also reports findings that
are not violations: ISSUED documents GİB refused after the integrator accepted them, and those
whose verdict recovery stopped waiting for (each with what to do).

Reads only. The database checks run in one REPEATABLE READ, READ ONLY transaction (one snapshot,
no row locks); the chain's verification in another (gapless.ops.chain). The integrator's side is
fetched outside any transaction (I5) and compared in a further one; invoices ISSUED after the
integrator was read are left out of that comparison, so a live system does not report its own
progress as a disagreement.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import httpx

from gapless.constants import Status
from gapless.errors import GaplessError
from gapless.integrator.base import UNKNOWN, TransientIntegratorError
from gapless.integrator.guard import Guard
from gapless.ledger.database import Database
from gapless.ledger.queries import audit as q
from gapless.ledger.series import series_spec
from gapless.ledger.verdicts import REFUSED_TODO, UNRESOLVED_TODO
from gapless.numbers import SeriesSpec, parse_number

if TYPE_CHECKING:
    from gapless.integrator.accounts import Accounts
    from gapless.ops.checkpoints import Checkpoints

#: Kinds of violation, in the order a person should read them.
VIOLATION_KINDS = (
    "duplicate_number",             # I1: one counter value on two invoices
    "duplicate_printed",            # I1: one printed number on two invoices of a tenant
    "gap",                          # I2: a counter value below the top on no invoice
    "counter_ahead",                # I2: the counter advanced past its highest pinned number
    "beyond_counter",               # I2: an invoice holds a value the counter never gave out
    "number_mismatch",              # I3: the printed number is not what the counter value prints
    "stuck",                        # I4: pinned and unsettled longer than the horizon
    "issued_unknown_to_integrator",  # I7
    "integrator_not_issued",        # I7
    "invoice_id_mismatch",          # I7
    "integrator_unknown_number",    # I7
    "integrator_ahead_of_counter",  # I7 + I1: the integrator holds a number the counter is below
    "integrator_duplicate",         # I1 at the integrator
    "chain_broken",                 # I8: a chain does not verify (docs/chain.md)
    "checkpoint_mismatch",          # I8: a chain no longer holds a head a checkpoint signed
    "checkpoint_invalid",           # I8: a checkpoint file the public key did not sign as is
)

#: What to do about the violations that mean the database lost numbers the integrator holds
#: (docs/operations.md, "After an unsafe failover"): each such violation carries its line.
LOST_SEAL_TODO = {
    "integrator_ahead_of_counter": (
        "this database lost the seal the integrator holds (a failover to a standby that lacked "
        "it, or a restore): stop the workers, then raise the counter past the highest number the "
        "integrator holds (`gapless series bump TENANT SERIES --past NUMBER`) before anything is "
        "sealed again; the integrator's document is the record of this number"),
    "invoice_id_mismatch": (
        "the integrator holds this number for its invoice, not for the one that holds it here: "
        "void the one here (`gapless invoice void INVOICE_ID --reason ...`; it was never "
        "accepted under this number) and publish it again under a new invoice_id"),
    "integrator_unknown_number": (
        "the integrator holds a number no invoice here holds: its document there is the record "
        "of it (GET /invoices/TENANT/NUMBER/document); if this database lost it, see "
        "docs/operations.md"),
}

#: Kinds of finding (not violations: the exit code ignores them), and what to do about each.
FINDING_KINDS = {
    "gib_refused": REFUSED_TODO,      # GİB refused the document after the integrator accepted it
    "gib_unresolved": UNRESOLVED_TODO,  # no final verdict from GİB when recovery gave up
}

LEDGER_ABSENT_STATUSES = (404, 405, 501)


class AuditError(GaplessError):
    """The audit could not be completed (e.g. the integrator cannot be read)."""


@dataclass(frozen=True)
class Violation:
    kind: str
    tenant: str
    series: str | None
    period_key: str | None
    numbers: str
    count: int
    detail: str
    invoice_ids: tuple[str, ...] = ()
    #: What to do (set for the violations of a lost seal, see LOST_SEAL_TODO; else empty).
    todo: str = ""


@dataclass(frozen=True)
class CounterReport:
    tenant: str
    series: str
    period_key: str
    last_no: int | None
    numbered: int
    issued: int
    sending: int
    error: int
    rejected: int
    voided: int
    other: int
    violations: int = 0


@dataclass(frozen=True)
class NotIssued:
    """A pinned number that is not ISSUED: where it went, and why."""

    tenant: str
    series: str
    period_key: str
    reserved_no: int
    number: str
    invoice_id: str
    status: str
    attempts: int
    reason: str
    age_s: float | None
    stuck: bool
    next_attempt_at: str | None


@dataclass(frozen=True)
class Finding:
    """Something a person should act on that breaks no invariant: a number still ISSUED and
    accounted for, whose document GİB refused (or never gave a verdict on)."""

    kind: str
    tenant: str
    series: str
    period_key: str | None
    number: str
    invoice_id: str
    detail: str
    checked_at: str | None
    todo: str


@dataclass(frozen=True)
class InFlight:
    """Accepted by the integrator while the invoice is still SENDING within the horizon."""

    tenant: str
    number: str
    invoice_id: str


@dataclass
class IntegratorCheck:
    source: str                       # "ledger" or "lookup"
    documents: int                    # accepted documents in the audited scope
    in_flight: list[InFlight] = field(default_factory=list)


@dataclass(frozen=True)
class ChainCheck:
    """The chains verified (I8), and the checkpoints they were checked against."""

    chains: int
    sealed: int
    checkpoints: int | None = None  # checkpoint files whose signature verified; None: not asked
    latest_checkpoint: str | None = None
    anchored: int = 0               # chains matching a signed checkpoint


@dataclass
class AuditReport:
    counters: list[CounterReport]
    violations: list[Violation]
    not_issued: list[NotIssued]
    horizon_s: float
    integrator: IntegratorCheck | None = None
    #: Not violations (``ok`` ignores them): see FINDING_KINDS.
    findings: list[Finding] = field(default_factory=list)
    chain: ChainCheck | None = None  # None: not checked (``--no-chain``)

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "horizon_s": self.horizon_s,
            "counters": [asdict(c) for c in self.counters],
            "violations": [asdict(v) for v in self.violations],
            "not_issued": [asdict(n) for n in self.not_issued],
            "integrator": None if self.integrator is None else asdict(self.integrator),
            "findings": [asdict(f) for f in self.findings],
            "chain": None if self.chain is None else asdict(self.chain),
        }

    def add_counted(self, violations: Sequence[Violation]) -> None:
        """Add violations found after the database checks, counted on their counters."""
        per_counter = Counter((v.tenant, v.series, v.period_key) for v in violations)
        self.counters = [replace(c, violations=c.violations
                                 + per_counter[(c.tenant, c.series, c.period_key)])
                         for c in self.counters]
        self.violations.extend(violations)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _reason(row: Any, horizon_s: float) -> str:
    status = Status(row.status)
    age = None if row.age_s is None else float(row.age_s)
    if status is Status.SENDING:
        held = f"sending for {_age(age or 0)} (attempt {row.attempts})"
        return held + (f", beyond the {horizon_s:.0f}s horizon" if row.stuck else
                       ", within the horizon")
    if status is Status.RECEIVED:
        return f"pinned {_age(age or 0)} ago, never sent"
    reason = row.last_error or "no reason recorded"
    if status is Status.ERROR:
        due = ("parked for an operator" if row.next_attempt_at is None
               else f"retry due {row.next_attempt_at:%Y-%m-%d %H:%M:%S}")
        return f"{reason} ({due})"
    return str(reason)


@dataclass(frozen=True)
class _Snapshot:
    """The rows the database checks read, all from one snapshot."""

    counters: list[Any]
    walked: list[Any]
    beyond: list[Any]
    printed: list[Any]
    mismatched: list[Any]
    not_issued: list[Any]
    findings: list[Any]


async def _read_snapshot(db: Database, params: dict[str, Any], deep: bool) -> _Snapshot:
    """Every statement of the checks in one REPEATABLE READ, READ ONLY snapshot; no row locks."""
    async with db.snapshot() as snap:
        return _Snapshot(
            counters=await snap.all(q.COUNTER_SUMMARY, params),
            walked=await snap.all(q.NUMBER_WALK, params),
            beyond=await snap.all(q.BEYOND_COUNTER, params),
            printed=await snap.all(q.DUPLICATE_PRINTED, params),
            mismatched=await snap.all(q.NUMBER_MISMATCH, params) if deep else [],
            not_issued=await snap.all(q.NOT_ISSUED, params),
            findings=await snap.all(q.GIB_FINDINGS, params))


def _duplicates(snapshot: _Snapshot) -> Iterator[Violation]:
    """I1: a counter value pinned on two invoices, a printed number held by two."""
    for row in snapshot.walked:
        if row.kind == "duplicate_number":
            yield Violation(
                "duplicate_number", row.tenant, row.series, row.period_key, str(row.first_no),
                1, f"no {row.first_no} ({row.number}) is pinned on {row.holders} invoices",
                tuple(row.invoice_ids))
    for row in snapshot.printed:
        yield Violation(
            "duplicate_printed", row.tenant, ",".join(row.series), None, row.number, 1,
            f"number {row.number} is held by {row.holders} invoices", tuple(row.invoice_ids))


def _holes(snapshot: _Snapshot) -> Iterator[Violation]:
    """I2: numbers the counter handed out that no invoice holds (a gap, or a short tail)."""
    for row in snapshot.walked:
        if row.kind == "duplicate_number":
            continue
        count = int(row.last_no - row.first_no + 1)
        span = _span(row.first_no, row.last_no)
        if row.kind == "gap":
            detail = f"{span} reserved by the counter but on no invoice ({count} missing)"
        else:
            detail = (f"counter is at {row.last_no} but invoices stop at {row.first_no - 1}; "
                      f"{span} on no invoice")
        yield Violation(row.kind, row.tenant, row.series, row.period_key, span, count, detail)


def _strays(snapshot: _Snapshot) -> Iterator[Violation]:
    """I2/I3: numbers held beyond their counter, printed numbers that do not match theirs."""
    for row in snapshot.beyond:
        where = ("no counter for this period" if row.last_no is None
                 else f"counter is only at {row.last_no}")
        yield Violation(
            "beyond_counter", row.tenant, row.series, row.period_key, str(row.reserved_no), 1,
            f"{row.invoice_id} ({row.status}) holds no {row.reserved_no}: {where}",
            (row.invoice_id,))
    for row in snapshot.mismatched:
        yield Violation(
            "number_mismatch", row.tenant, row.series, row.period_key, str(row.reserved_no), 1,
            f"{row.invoice_id} prints {row.number}, counter value {row.reserved_no} prints "
            f"{row.expected}", (row.invoice_id,))


def _not_issued(snapshot: _Snapshot, horizon_s: float) -> list[NotIssued]:
    """Every numbered invoice that is not ISSUED, with what it is waiting for."""
    return [NotIssued(
        row.tenant, row.series, row.period_key, row.reserved_no, row.number, row.invoice_id,
        row.status, row.attempts, _reason(row, horizon_s),
        None if row.age_s is None else float(row.age_s), bool(row.stuck),
        None if row.next_attempt_at is None else row.next_attempt_at.isoformat())
        for row in snapshot.not_issued]


def _findings(snapshot: _Snapshot) -> list[Finding]:
    """ISSUED documents GİB refused, or gave no verdict on before recovery gave up."""
    return [Finding(
        row.kind, row.tenant, row.series, row.period_key, row.number, row.invoice_id,
        row.gib_detail or "no detail", None if row.gib_checked_at is None
        else row.gib_checked_at.isoformat(), FINDING_KINDS[row.kind])
        for row in snapshot.findings]


def _stuck(not_issued: list[NotIssued]) -> Iterator[Violation]:
    """I4's horizon: SENDING (or due) past it."""
    for item in not_issued:
        if item.stuck:
            yield Violation("stuck", item.tenant, item.series, item.period_key,
                            str(item.reserved_no), 1,
                            f"{item.invoice_id} {item.status}: {item.reason}",
                            (item.invoice_id,))


def _counter_reports(snapshot: _Snapshot, violations: list[Violation]) -> list[CounterReport]:
    per_counter: Counter[tuple[str, str, str | None]] = Counter(
        (violation.tenant, violation.series or "", violation.period_key)
        for violation in violations)
    return [CounterReport(row.tenant, row.series, row.period_key, row.last_no, row.numbered,
                          row.issued, row.sending, row.error, row.rejected, row.voided,
                          row.other, per_counter[(row.tenant, row.series, row.period_key)])
            for row in snapshot.counters]


async def check_database(db: Database, *, tenant: str | None, series: str | None,
                         horizon_s: float, deep: bool = False) -> AuditReport:
    """I1–I3 (and I4's horizon) over counters and invoices, in one snapshot; no row locks.

    ``deep`` also re-renders every printed number from its counter value (slower: string work
    per row) to catch a number edited by hand.
    """
    snapshot = await _read_snapshot(
        db, {"tenant": tenant, "series": series, "horizon_s": horizon_s}, deep)
    not_issued = _not_issued(snapshot, horizon_s)
    violations = [*_duplicates(snapshot), *_holes(snapshot), *_strays(snapshot),
                  *_stuck(not_issued)]
    violations.sort(key=lambda v: (VIOLATION_KINDS.index(v.kind), v.tenant, v.series or "",
                                   v.period_key or ""))
    return AuditReport(_counter_reports(snapshot, violations), violations, not_issued,
                       horizon_s, findings=_findings(snapshot))


# ----------------------------------------------------------------------------- I8: the chain


async def check_chains(db: Database, *, tenant: str | None, series: str | None,
                       checkpoints: Checkpoints | None = None
                       ) -> tuple[list[Violation], ChainCheck]:
    """I8: every chain in scope verified (gapless.ops.chain.verify: one snapshot, no lock), and
    against the signed heads of ``checkpoints`` when given; one violation per broken chain,
    per checkpoint a chain no longer matches, and per checkpoint file refused."""
    from gapless.ops.chain import verify

    reports = await verify(db, tenant=tenant, series=series,
                           heads=checkpoints.heads if checkpoints is not None else ())
    violations: list[Violation] = []
    for r in reports:
        if r.reason is not None:
            named = r.broken_no is not None
            violations.append(Violation(
                "chain_broken", r.tenant, r.series, r.period_key,
                str(r.broken_no) if named else "", 1,
                f"number {r.broken_number or '?'}: {r.reason}" if named else r.reason))
        if r.checkpoint_reason is not None:
            violations.append(Violation(
                "checkpoint_mismatch", r.tenant, r.series, r.period_key, str(r.checkpoint_no),
                1, f"number {r.checkpoint_number or '?'}: {r.checkpoint_reason}"))
    for name, why in checkpoints.invalid if checkpoints is not None else ():
        violations.append(Violation("checkpoint_invalid", "", None, None, "", 1,
                                    f"{name}: {why}"))
    check = ChainCheck(
        len(reports), sum(r.counts["seal"] for r in reports),
        None if checkpoints is None else len(checkpoints.valid),
        None if checkpoints is None else checkpoints.latest,
        sum(r.anchor is not None for r in reports))
    return violations, check


# ----------------------------------------------------------------------------- I7: integrator


async def fetch_ledger(integrator_url: str, *, timeout_s: float) -> list[dict[str, Any]] | None:
    """``GET {integrator_url}/ledger`` (the mock's API): every accepted document.

    None when the integrator has no ledger endpoint (a real adapter: fall back to lookups).
    Raises AuditError when the integrator cannot be read.
    """
    try:
        async with httpx.AsyncClient(base_url=integrator_url.rstrip("/"),
                                     timeout=timeout_s) as http:
            response = await http.get("/ledger")
    except httpx.HTTPError as exc:
        raise AuditError(f"cannot read the integrator's ledger at {integrator_url}: "
                         f"{type(exc).__name__}: {exc}") from exc
    if response.status_code in LEDGER_ABSENT_STATUSES:
        return None
    if response.status_code != 200:
        raise AuditError(f"the integrator's ledger answered {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        return None
    if not isinstance(body, list):
        return None
    return [{"tenant": d["tenant"], "number": d["number"], "invoice_id": d["invoice_id"]}
            for d in body]


async def numbered_invoices(db: Database, *, tenant: str | None,
                            series: str | None) -> list[Any]:
    """Every pinned number in scope with its holder (no lock)."""
    return await db.all(q.NUMBERED_INVOICES, {"tenant": tenant, "series": series})


async def ledger_by_lookup(integrator: Guard, invoices: Sequence[Any], *,
                           concurrency: int = 16) -> list[dict[str, Any]]:
    """Ask the integrator about each numbered invoice (``tenant``, ``number``, ``uuid``,
    ``invoice_id``): the accepted ones, as a ledger. By number, or by the document's UUID where
    the adapter cannot look numbers up (a field the integrator does not tell is the invoice's).

    Raises AuditError when a number cannot be looked up (the answer would be incomplete).
    """
    gate = asyncio.Semaphore(concurrency)
    by_number = getattr(integrator, "looks_up_numbers", True)

    async def one(row: Any) -> dict[str, Any] | None:
        async with gate:
            try:
                if by_number:
                    receipt = await integrator.lookup(row.tenant, row.number)
                else:
                    receipt = await integrator.lookup_uuid(row.tenant, str(row.uuid))
            except TransientIntegratorError as exc:
                raise AuditError(f"cannot look up {row.number} at the integrator: {exc}"
                                 ) from exc
        if receipt is None:
            return None
        return {"tenant": receipt.tenant,
                "number": row.number if receipt.number == UNKNOWN else receipt.number,
                "invoice_id": row.invoice_id if receipt.invoice_id == UNKNOWN
                else receipt.invoice_id}

    found = await asyncio.gather(*(one(row) for row in invoices))
    return [entry for entry in found if entry is not None]


async def db_now(db: Database) -> datetime:
    value = (await db.one(q.DB_NOW))[0]
    assert isinstance(value, datetime)
    return value


async def compare_with_ledger(db: Database, ledger: Sequence[dict[str, Any]], *,
                              tenant: str | None, series: str | None, horizon_s: float,
                              read_at: datetime, source: str) -> tuple[list[Violation],
                                                                      IntegratorCheck]:
    """I7: the ledger (read at ``read_at``) against the ISSUED invoices; one snapshot, no locks.

    Invoices ISSUED after ``read_at`` are not judged (their acceptance may postdate the read);
    a document accepted for an invoice still SENDING within the horizon is in flight, reported
    but not a violation.
    """
    params = {"ledger": json.dumps(list(ledger)), "tenant": tenant, "series": series,
              "read_at": read_at, "horizon_s": horizon_s}
    async with db.snapshot() as snap:
        rows = await snap.all(q.LEDGER_MISMATCH, params)
        documents = int((await snap.one(q.LEDGER_IN_SCOPE, params)).documents)
        places = await _Places.read(snap, [row for row in rows if row.kind in LOST_SEAL_TODO])
    check = IntegratorCheck(source, documents)
    violations: list[Violation] = []
    for row in rows:
        ids = tuple(i for i in (row.db_invoice_id, row.integrator_invoice_id) if i)
        if row.kind == "integrator_not_issued" and row.in_flight:
            check.in_flight.append(InFlight(row.tenant, row.number, row.db_invoice_id))
            continue
        if row.kind == "issued_unknown_to_integrator":
            detail = f"{row.db_invoice_id} is ISSUED here; the integrator has no {row.number}"
        elif row.kind == "integrator_not_issued":
            detail = (f"the integrator accepted {row.number} for {row.db_invoice_id}; "
                      f"here it is {row.status}")
        elif row.kind == "invoice_id_mismatch":
            detail = (f"{row.number} is {row.integrator_invoice_id} at the integrator but "
                      f"{row.db_invoice_id} ({row.status}) here")
        elif row.kind == "integrator_unknown_number":
            detail = (f"the integrator accepted {row.number} for {row.integrator_invoice_id}; "
                      "no invoice here holds it")
        else:
            detail = (f"the integrator accepted {row.number} more than once: "
                      f"{row.integrator_invoice_id}")
        violation = Violation(row.kind, row.tenant, row.series, None, row.number, 1, detail,
                              ids)
        violations.append(places.explain(violation, row) if row.kind in LOST_SEAL_TODO
                          else violation)
    return violations, check


@dataclass
class _Places:
    """Where the numbers of a lost seal belong: the series that prints each (its counter) and
    the integrator's invoice as this database knows it. Read in the audit's snapshot."""

    series: dict[str, list[SeriesSpec]] = field(default_factory=dict)
    counters: dict[tuple[str, str, str], int] = field(default_factory=dict)
    invoices: dict[tuple[str, str], Any] = field(default_factory=dict)

    @classmethod
    async def read(cls, snap: Database, rows: Sequence[Any]) -> _Places:
        places = cls()
        if not rows:
            return places
        tenants = sorted({row.tenant for row in rows})
        for spec_row in await snap.all(q.SERIES_OF_TENANTS, {"tenants": tenants}):
            places.series.setdefault(spec_row.tenant, []).append(series_spec(spec_row))
        for counter in await snap.all(q.COUNTERS_OF_TENANTS, {"tenants": tenants}):
            places.counters[(counter.tenant, counter.series, counter.period_key)] = int(
                counter.last_no)
        ids = sorted({row.integrator_invoice_id for row in rows if row.integrator_invoice_id})
        for invoice in await snap.all(q.INVOICES_BY_ID, {"ids": ids}):
            places.invoices[(invoice.tenant, invoice.invoice_id)] = invoice
        return places

    def locate(self, tenant: str, number: str) -> tuple[str, str, int] | None:
        """(series, period_key, counter value) of a printed number of the tenant."""
        for spec in self.series.get(tenant, []):
            found = parse_number(spec, number)
            if found is not None:
                return spec.code, found[0], found[1]
        return None

    def whereabouts(self, tenant: str, invoice_id: str, number: str) -> str:
        """Where the integrator's invoice (of ``tenant``) is in this database (it may have lost
        it)."""
        invoice = self.invoices.get((tenant, invoice_id))
        if invoice is None:
            return f"{invoice_id} is not in this database"
        if invoice.number is None:
            return f"{invoice_id} is here without a number ({invoice.status})"
        if invoice.number == number:
            return f"{invoice_id} holds it here ({invoice.status})"
        twice = (f": the integrator holds {invoice_id} under two numbers"
                 if invoice.status == "ISSUED" else "")
        return f"{invoice_id} holds {invoice.number} here ({invoice.status}){twice}"

    def explain(self, violation: Violation, row: Any) -> Violation:
        """The violation with where its number belongs, what became of the integrator's
        invoice here, and what to do; a number above its counter becomes
        ``integrator_ahead_of_counter``."""
        where = self.whereabouts(row.tenant, row.integrator_invoice_id, row.number)
        located = self.locate(row.tenant, row.number)
        if located is None:
            return replace(violation, detail=f"{violation.detail}; {where}",
                           todo=LOST_SEAL_TODO[violation.kind])
        series, period, value = located
        last_no = self.counters.get((row.tenant, series, period))
        counter = f"counter {row.tenant}/{series}/{period}"
        if row.kind == "integrator_unknown_number" and (last_no is None or value > last_no):
            at = "has no row" if last_no is None else f"is at {last_no}"
            return Violation(
                "integrator_ahead_of_counter", row.tenant, series, period, row.number, 1,
                f"the integrator accepted {row.number} (no {value}) for "
                f"{row.integrator_invoice_id}, but the {counter} {at}: this database lost the "
                f"seal and would hand no {value} out again; {where}", violation.invoice_ids,
                LOST_SEAL_TODO["integrator_ahead_of_counter"])
        at = "no row" if last_no is None else f"at {last_no}"
        return replace(violation, series=series, period_key=period,
                       detail=f"{violation.detail} (no {value}, {counter} {at}); {where}",
                       todo=LOST_SEAL_TODO[violation.kind])


async def check_integrator(db: Database, integrator_url: str,
                           integrator: Guard | None, *, tenant: str | None,
                           series: str | None, horizon_s: float,
                           timeout_s: float) -> tuple[list[Violation], IntegratorCheck]:
    """I7 with the integrator's ledger if it has one, else a lookup of every pinned number."""
    read_at = await db_now(db)
    ledger = await fetch_ledger(integrator_url, timeout_s=timeout_s)
    source = "ledger"
    if ledger is None:
        if integrator is None:
            raise AuditError("the integrator has no ledger and no adapter was given for lookups")
        source = "lookup"
        read_at = await db_now(db)
        rows = await numbered_invoices(db, tenant=tenant, series=series)
        ledger = await ledger_by_lookup(integrator, rows)
    return await compare_with_ledger(db, ledger, tenant=tenant, series=series,
                                     horizon_s=horizon_s, read_at=read_at, source=source)


async def check_accounts(db: Database, accounts: Accounts, *, tenant: str | None,
                         series: str | None, horizon_s: float,
                         timeout_s: float) -> tuple[list[Violation], IntegratorCheck]:
    """I7 over every integrator account (GAPLESS_INTEGRATORS_FILE): each account's ledger, if
    it has one, else a lookup of its tenants' pinned numbers through its own guard — each
    account judged only for the tenants that use it — compared with the invoices at once. With
    one account this is :func:`check_integrator`."""
    plan = accounts.plan
    if len(plan.accounts) == 1:
        return await check_integrator(db, plan.accounts[0].endpoint, accounts, tenant=tenant,
                                      series=series, horizon_s=horizon_s, timeout_s=timeout_s)
    read_at = await db_now(db)
    ledger: list[dict[str, Any]] = []
    sources: set[str] = set()
    rows: list[Any] | None = None
    for account, guard in accounts.guards():
        def own(entry_tenant: str, name: str = account.name) -> bool:
            return plan.of(entry_tenant).name == name

        found = await fetch_ledger(account.endpoint, timeout_s=timeout_s)
        if found is not None:
            sources.add("ledger")
            ledger += [entry for entry in found if own(entry["tenant"])]
            continue
        sources.add("lookup")
        if rows is None:
            rows = await numbered_invoices(db, tenant=tenant, series=series)
        ledger += await ledger_by_lookup(guard, [row for row in rows if own(row.tenant)])
    return await compare_with_ledger(db, ledger, tenant=tenant, series=series,
                                     horizon_s=horizon_s, read_at=read_at,
                                     source="+".join(sorted(sources)))
