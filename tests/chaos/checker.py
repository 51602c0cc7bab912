"""The chaos checker: after a run, compare everything that was recorded with the final state.

Jepsen-style: the run records its *history* (what was published, what the feed poller saw, what
the dead-letter queue holds, what the integrator accepted, which faults were injected); once the
load has stopped and recovery has settled, :func:`check` reads the database in one snapshot and
verifies, independently of the product's own audit:

- **I1** no number twice — per counter value and per printed number in the database, and per
  (tenant, number) in the integrator's ledger;
- **I2** every counter's reserved numbers are exactly 1..last_no, each on exactly one invoice;
- **I3** one number per invoice_id — the number on an invoice never changed across its events, and
  the ledger holds an invoice_id under at most one number;
- **I4** every published valid invoice is present and settled (ISSUED, REJECTED, ERROR with a
  reason, CANCELLED, VOIDED), none RECEIVED or SENDING, nothing unpublished appeared; every
  malformed message is in the dead-letter queue and no valid one is;
- **I6** the poller saw every event exactly once, in sequence order, equal to the table;
- **I7** the ledger equals the ISSUED set, by (tenant, number, invoice_id);
- **transitions** each invoice's history starts at RECEIVED, chains (from = previous to), uses
  only allowed transitions and ends at the invoice's current status.

It prints a summary table and, when anything is violated, raises :class:`InvariantViolation`
listing the exact violating rows. The checker only reads.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row

from gapless.constants import ALLOWED_TRANSITIONS, ANSWER_EVENT_KINDS, GIB_EVENT_KINDS, Status
from gapless.ledger.conninfo import driver_conninfo

#: How many violating rows a failure message shows per violation (the Report keeps them all).
SHOWN_ROWS = 50

# ---------------------------------------------------------------------------------- the queries
# All read-only, run in one REPEATABLE READ READ ONLY transaction: one snapshot, no row locks.

#: Every counter row (tenant, series, period) and the last number it gave out.
COUNTERS = """
    SELECT tenant, series, period_key, last_no FROM number_counters
     ORDER BY tenant, series, period_key
"""

#: Every invoice with what the invariants need (no payload).
INVOICES = """
    SELECT id, invoice_id, tenant, series, status, period_key, reserved_no, number, attempts,
           last_error, next_attempt_at, sending_since, integrator_ref
      FROM invoices ORDER BY id
"""

#: Every event in commit order; rows without a sequence_id (never committed properly) last.
EVENTS = """
    SELECT id, sequence_id, invoice_pk, invoice_id, tenant, series, kind, from_status, to_status,
           number, attempts
      FROM invoice_events ORDER BY sequence_id NULLS LAST, id
"""

Expect = Literal["issued", "rejected", "any"]


# --------------------------------------------------------------------------------- the history


@dataclass(frozen=True)
class Published:
    """A valid invoice message the run published (and had confirmed by the broker)."""

    invoice_id: str
    tenant: str
    series: str
    #: "rejected": the integrator always rejects it (tax id 0000000000); "issued": nothing can
    #: stop it (no random rejections in this run); "any": either outcome is legitimate.
    expect: Expect = "any"


@dataclass(frozen=True)
class DeadLetter:
    """A message found in ``<prefix>.dead``."""

    message_id: str | None
    reason: str | None
    body: bytes = b""


@dataclass(frozen=True)
class FeedRecord:
    """One event as a feed client received it."""

    sequence_id: int
    invoice_id: str
    from_status: str | None
    to_status: str
    number: str | None
    kind: str

    @classmethod
    def of(cls, event: Any) -> FeedRecord:
        """From a :class:`gapless.ledger.feed.FeedEvent`, an API JSON dict, or a table row."""
        get = event.get if isinstance(event, Mapping) else lambda key: getattr(event, key)
        return cls(int(get("sequence_id")), get("invoice_id"), get("from_status"),
                   get("to_status"), get("number"), get("kind"))


@dataclass
class History:
    """Everything a run recorded, for :func:`check`."""

    published: dict[str, Published] = field(default_factory=dict)
    #: Extra publishes of invoice_ids already in ``published`` (each must change nothing).
    duplicate_publishes: int = 0
    #: message_id -> what was wrong with it; each must end in the dead-letter queue.
    malformed: dict[str, str] = field(default_factory=dict)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    feed: list[FeedRecord] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    #: Faults injected, by kind (the runner's own and the mock integrator's counts).
    faults: Counter[str] = field(default_factory=Counter)

    def publish(self, invoice_id: str, tenant: str, series: str, expect: Expect = "any") -> None:
        if invoice_id in self.published:
            self.duplicate_publishes += 1
        else:
            self.published[invoice_id] = Published(invoice_id, tenant, series, expect)


@dataclass(frozen=True)
class Expectations:
    """How strict I4 is for a run."""

    #: Every published invoice whose expectation is not "rejected" must end ISSUED.
    all_issued: bool = False
    #: An ERROR row with a recorded reason counts as settled ("reported"); otherwise it is stuck.
    error_ok: bool = True


# ---------------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class Violation:
    invariant: str
    what: str
    rows: tuple[dict[str, Any], ...]

    def render(self, limit: int = SHOWN_ROWS) -> str:
        lines = [f"[{self.invariant}] {self.what}: {len(self.rows)} row(s)"]
        lines += [f"    {_row_text(row)}" for row in self.rows[:limit]]
        if len(self.rows) > limit:
            lines.append(f"    … and {len(self.rows) - limit} more")
        return "\n".join(lines)


class InvariantViolation(AssertionError):
    """The run broke at least one invariant; the message lists every violation and its rows."""

    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__("chaos checker found violations:\n"
                         + "\n".join(v.render() for v in report.violations)
                         + "\n\n" + report.summary())


@dataclass
class Report:
    counts: dict[str, int]
    faults: Counter[str]
    violations: list[Violation]

    @property
    def ok(self) -> bool:
        return not self.violations

    def of(self, invariant: str) -> list[Violation]:
        return [v for v in self.violations if v.invariant == invariant]

    def summary(self) -> str:
        """A plain-text table: what was published and became of it, faults, violations."""
        width = max([len(k) for k in (*self.counts, *self.faults)] + [24])
        lines = ["chaos run summary", "=" * (width + 12)]
        lines += [f"{name:<{width}} {value:>10}" for name, value in self.counts.items()]
        lines.append("-" * (width + 12))
        lines.append("faults injected")
        if self.faults:
            lines += [f"  {name:<{width - 2}} {count:>10}"
                      for name, count in sorted(self.faults.items())]
        else:
            lines.append(f"  {'(none)':<{width - 2}} {0:>10}")
        lines.append("-" * (width + 12))
        per_invariant = Counter(v.invariant for v in self.violations)
        lines.append(f"{'violations':<{width}} {len(self.violations):>10}")
        lines += [f"  {name:<{width - 2}} {count:>10}" for name, count in sorted(
            per_invariant.items())]
        return "\n".join(lines)

    def raise_for_violations(self) -> None:
        if self.violations:
            raise InvariantViolation(self)


def _row_text(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={_plain(value)}" for key, value in row.items())


def _plain(value: Any) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        return json.dumps(value, ensure_ascii=False)
    return str(value)


# ---------------------------------------------------------------------------------- the checks


@dataclass
class _Snapshot:
    counters: list[dict[str, Any]]
    invoices: list[dict[str, Any]]
    events: list[dict[str, Any]]


def _read(database_url: str) -> _Snapshot:
    conninfo = driver_conninfo(database_url)
    with psycopg.connect(conninfo, row_factory=dict_row,
                         application_name="gapless-chaos-checker") as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        counters = conn.execute(COUNTERS).fetchall()
        invoices = conn.execute(INVOICES).fetchall()
        events = conn.execute(EVENTS).fetchall()
        conn.rollback()
    return _Snapshot(counters, invoices, events)


def check(database_url: str, history: History,
          expectations: Expectations | None = None) -> Report:
    """Check I1–I4, I6, I7 and the transitions of a finished run; see the module docstring."""
    snapshot = _read(database_url)
    return check_snapshot(snapshot, history, expectations or Expectations())


def check_snapshot(snapshot: _Snapshot, history: History,
                   expectations: Expectations) -> Report:
    violations: list[Violation] = []

    def flag(invariant: str, what: str, rows: Iterable[Mapping[str, Any]]) -> None:
        found = tuple(dict(row) for row in rows)
        if found:
            violations.append(Violation(invariant, what, found))

    invoices = snapshot.invoices
    by_pk = {row["id"]: row for row in invoices}
    by_invoice_id = {row["invoice_id"]: row for row in invoices}
    numbered = [row for row in invoices if row["reserved_no"] is not None]

    _check_i1(flag, numbered, history.ledger)
    _check_i2(flag, snapshot.counters, numbered)
    _check_i3(flag, by_pk, snapshot.events, history.ledger)
    _check_i4(flag, invoices, by_invoice_id, history, expectations)
    _check_i6(flag, snapshot.events, history.feed)
    _check_i7(flag, invoices, history.ledger)
    _check_transitions(flag, by_pk, snapshot.events)

    statuses = Counter(row["status"] for row in invoices)
    dead_ids = Counter(d.message_id for d in history.dead_letters)
    counts = {
        "published (valid)": len(history.published),
        "duplicate publishes": history.duplicate_publishes,
        "malformed published": len(history.malformed),
        "invoices in database": len(invoices),
        **{f"  {status.value}": statuses.get(status.value, 0) for status in Status},
        "dead-lettered": len(history.dead_letters),
        "  of which redelivered twice": sum(n - 1 for n in dead_ids.values() if n > 1),
        "counters": len(snapshot.counters),
        "numbers reserved": len(numbered),
        "highest counter": max((c["last_no"] for c in snapshot.counters), default=0),
        "ledger entries": len(history.ledger),
        "events in table": len(snapshot.events),
        "events seen by poller": len(history.feed),
    }
    return Report(counts, Counter(history.faults), violations)


Flag = Any  # the ``flag`` closure of check_snapshot


def _duplicates(rows: Sequence[Mapping[str, Any]], key: Sequence[str]) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[tuple(row[k] for k in key)].append(row)
    return [dict(row) for group in groups.values() if len(group) > 1 for row in group]


def _invoice_brief(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("invoice_id", "tenant", "series", "period_key", "reserved_no",
                                "number", "status") if k in row}


def _check_i1(flag: Flag, numbered: list[dict[str, Any]], ledger: list[dict[str, Any]]) -> None:
    flag("I1", "one counter value on several invoices",
         (_invoice_brief(r) for r in _duplicates(
             numbered, ("tenant", "series", "period_key", "reserved_no"))))
    flag("I1", "one printed number on several invoices of a tenant",
         (_invoice_brief(r) for r in _duplicates(numbered, ("tenant", "number"))))
    flag("I1", "the integrator accepted one number several times",
         _duplicates(ledger, ("tenant", "number")))


def _check_i2(flag: Flag, counters: list[dict[str, Any]],
              numbered: list[dict[str, Any]]) -> None:
    pinned: dict[tuple[str, str, str], Counter[int]] = defaultdict(Counter)
    for row in numbered:
        pinned[(row["tenant"], row["series"], row["period_key"])][row["reserved_no"]] += 1
    gaps, doubles, beyond = [], [], []
    for counter in counters:
        key = (counter["tenant"], counter["series"], counter["period_key"])
        held = pinned.pop(key, Counter())
        last_no = counter["last_no"]
        where = {"tenant": key[0], "series": key[1], "period_key": key[2], "last_no": last_no}
        gaps += [{**where, "missing_no": no} for no in range(1, last_no + 1) if no not in held]
        doubles += [{**where, "reserved_no": no, "invoices": n}
                    for no, n in sorted(held.items()) if n > 1]
        beyond += [{**where, "reserved_no": no} for no in sorted(held) if no > last_no]
    flag("I2", "counter value below last_no pinned on no invoice (gap)", gaps)
    flag("I2", "counter value pinned on more than one invoice", doubles)
    flag("I2", "invoice holds a value its counter never gave out", beyond)
    flag("I2", "invoice numbered under a counter that does not exist",
         ({"tenant": k[0], "series": k[1], "period_key": k[2], "reserved_no": no}
          for k, held in pinned.items() for no in sorted(held)))


def _check_i3(flag: Flag, by_pk: dict[int, dict[str, Any]], events: list[dict[str, Any]],
              ledger: list[dict[str, Any]]) -> None:
    numbers: dict[int, set[str]] = defaultdict(set)
    for event in events:
        if event["number"] is not None:
            numbers[event["invoice_pk"]].add(event["number"])
    changed = []
    for pk, seen in numbers.items():
        current = by_pk.get(pk, {}).get("number")
        if len(seen) > 1 or (current is not None and current not in seen):
            changed.append({"invoice_id": by_pk.get(pk, {}).get("invoice_id"),
                            "numbers_in_events": sorted(seen), "number_now": current})
    flag("I3", "the number of an invoice changed across its history", changed)
    per_invoice: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in ledger:
        per_invoice[entry["invoice_id"]].append(entry)
    flag("I3", "the integrator holds one invoice_id under several numbers",
         (dict(e) for entries in per_invoice.values() if len(entries) > 1 for e in entries))


SETTLED = {Status.ISSUED, Status.REJECTED, Status.ERROR, Status.CANCELLED, Status.VOIDED}
NEEDS_REASON = {Status.REJECTED, Status.ERROR, Status.CANCELLED, Status.VOIDED}


def _check_i4(flag: Flag, invoices: list[dict[str, Any]],
              by_invoice_id: dict[str, dict[str, Any]], history: History,
              expectations: Expectations) -> None:
    missing, unsettled, no_reason, unexpected, wrong_outcome = [], [], [], [], []
    for invoice_id, published in sorted(history.published.items()):
        row = by_invoice_id.get(invoice_id)
        if row is None:
            missing.append({"invoice_id": invoice_id, "tenant": published.tenant,
                            "series": published.series})
            continue
        status = Status(row["status"])
        brief = {**_invoice_brief(row), "attempts": row["attempts"],
                 "last_error": row["last_error"]}
        if status not in SETTLED or (status is Status.ERROR and not expectations.error_ok):
            unsettled.append({**brief, "sending_since": row["sending_since"],
                              "next_attempt_at": row["next_attempt_at"]})
        elif status in NEEDS_REASON and not (row["last_error"] or "").strip():
            no_reason.append(brief)
        if published.expect == "rejected" and status not in (Status.REJECTED, Status.VOIDED):
            wrong_outcome.append({**brief, "expected": "REJECTED"})
        elif (published.expect == "issued" or expectations.all_issued) and \
                published.expect != "rejected" and status is not Status.ISSUED:
            wrong_outcome.append({**brief, "expected": "ISSUED"})
        if (row["tenant"], row["series"]) != (published.tenant, published.series):
            unexpected.append({**brief, "published_as": f"{published.tenant}/{published.series}"})
    for row in invoices:
        if row["invoice_id"] not in history.published:
            unexpected.append({**_invoice_brief(row), "published_as": None})
    flag("I4", "published invoice has no row", missing)
    flag("I4", "invoice not settled (RECEIVED/SENDING, or ERROR when not allowed)", unsettled)
    flag("I4", "settled without a recorded reason", no_reason)
    flag("I4", "invoice ended in the wrong outcome", wrong_outcome)
    flag("I4", "invoice row nobody published (or under another tenant/series)", unexpected)

    dead = Counter(d.message_id for d in history.dead_letters)
    flag("I4", "malformed message not in the dead-letter queue",
         ({"message_id": mid, "malformed": kind} for mid, kind in sorted(
             history.malformed.items()) if dead.get(mid, 0) == 0))
    flag("I4", "dead letter that is not one of the malformed messages",
         ({"message_id": d.message_id, "reason": d.reason, "valid_invoice":
           d.message_id in history.published}
          for d in history.dead_letters if d.message_id not in history.malformed))


def _check_i6(flag: Flag, events: list[dict[str, Any]], feed: list[FeedRecord]) -> None:
    flag("I6", "event without a sequence_id (not visible to the feed)",
         ({k: e[k] for k in ("id", "invoice_id", "kind", "from_status", "to_status")}
          for e in events if e["sequence_id"] is None))
    table = {e["sequence_id"]: e for e in events if e["sequence_id"] is not None}
    seen = Counter(r.sequence_id for r in feed)
    flag("I6", "the poller saw an event more than once",
         ({"sequence_id": sid, "times": n} for sid, n in sorted(seen.items()) if n > 1))
    flag("I6", "the poller saw events out of sequence order",
         ({"position": i, "sequence_id": feed[i].sequence_id, "after": feed[i - 1].sequence_id}
          for i in range(1, len(feed)) if feed[i].sequence_id < feed[i - 1].sequence_id))
    flag("I6", "the poller missed an event",
         ({k: table[sid][k] for k in ("sequence_id", "invoice_id", "kind", "from_status",
                                      "to_status", "number")}
          for sid in sorted(set(table) - set(seen))))
    flag("I6", "the poller saw an event the table does not have",
         ({"sequence_id": r.sequence_id, "invoice_id": r.invoice_id, "to_status": r.to_status}
          for r in feed if r.sequence_id not in table))
    differs = []
    for record in {r.sequence_id: r for r in feed}.values():
        row = table.get(record.sequence_id)
        if row is None:
            continue
        stored = FeedRecord.of(row)
        if stored != record:
            differs.append({"sequence_id": record.sequence_id, "seen": str(record),
                            "table": str(stored)})
    flag("I6", "the poller saw an event different from the table", differs)


def _check_i7(flag: Flag, invoices: list[dict[str, Any]], ledger: list[dict[str, Any]]) -> None:
    issued = {(r["tenant"], r["number"], r["invoice_id"]): r for r in invoices
              if r["status"] == Status.ISSUED}
    accepted = {(e["tenant"], e["number"], e["invoice_id"]): e for e in ledger}
    flag("I7", "ISSUED in the database, unknown to the integrator",
         (_invoice_brief(issued[key]) for key in sorted(set(issued) - set(accepted))))
    by_number = {(r["tenant"], r["number"]): r for r in invoices if r["number"] is not None}
    extra = []
    for key in sorted(set(accepted) - set(issued)):
        holder = by_number.get((key[0], key[1]))
        extra.append({**accepted[key], "db_holder": None if holder is None else
                      holder["invoice_id"], "db_status": None if holder is None else
                      holder["status"]})
    flag("I7", "accepted by the integrator, not ISSUED in the database", extra)


def _check_transitions(flag: Flag, by_pk: dict[int, dict[str, Any]],
                       events: list[dict[str, Any]]) -> None:
    history: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in events:  # already in commit order
        if event["invoice_pk"] is not None:  # None: a refusal's event, no invoice
            history[event["invoice_pk"]].append(event)
    bad = []

    def brief(event: Mapping[str, Any], problem: str) -> dict[str, Any]:
        return {"invoice_id": event["invoice_id"], "sequence_id": event["sequence_id"],
                "kind": event["kind"], "from_status": event["from_status"],
                "to_status": event["to_status"], "problem": problem}

    for pk, chain in history.items():
        first = chain[0]
        if first["from_status"] is not None or first["to_status"] != Status.RECEIVED:
            bad.append(brief(first, "history does not start with NULL -> RECEIVED"))
        for previous, event in pairwise(chain):
            if event["from_status"] != previous["to_status"]:
                bad.append(brief(event, f"from_status does not follow the previous event "
                                        f"(-> {previous['to_status']})"))
            elif not _allowed(event):
                bad.append(brief(event, "transition not allowed"))
        invoice = by_pk.get(pk)
        if invoice is None:
            bad.append(brief(chain[-1], "events of an invoice that does not exist"))
        elif chain[-1]["to_status"] != invoice["status"]:
            bad.append(brief(chain[-1], f"history ends at {chain[-1]['to_status']}, invoice is "
                                        f"{invoice['status']}"))
    for pk, invoice in by_pk.items():
        if pk not in history:
            bad.append({"invoice_id": invoice["invoice_id"], "status": invoice["status"],
                        "problem": "invoice without any event"})
    flag("transitions", "state change outside the allowed transitions", bad)


def _allowed(event: Mapping[str, Any]) -> bool:
    try:
        pair = (Status(event["from_status"]), Status(event["to_status"]))
    except ValueError:
        return False
    if pair == (Status.RECEIVED, Status.RECEIVED):
        # The reservation pins a number before the lease is taken (same transaction).
        return bool(event["kind"] == "reserved")
    if pair == (Status.ISSUED, Status.ISSUED):
        # GİB's verdict and the receiver's answer after acceptance: recorded in the history,
        # the status unchanged.
        return event["kind"] in GIB_EVENT_KINDS | ANSWER_EVENT_KINDS
    return pair in ALLOWED_TRANSITIONS
