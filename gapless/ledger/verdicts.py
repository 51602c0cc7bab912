"""GİB's verdict after acceptance: when to ask, and the domain operations that claim a question
and record its answer.

The integrator accepting a document is not the end: GİB (the tax authority) then accepts or
refuses it. An e-Fatura usually has its verdict within minutes; an e-Arşiv stays "unknown" until
GİB's nightly report. ``gapless recovery`` therefore asks about every ISSUED document whose
adapter can answer (``status(tenant, uuid)``), with a backoff per channel (:class:`GibPolicy`),
until the verdict is final — or gives up, still pending, after ``give_up_s``.

The same question answers the **receiver's answer** (:class:`gapless.integrator.base.Answer`):
a dispatch note (e-İrsaliye Yanıtı) and a ``TICARIFATURA`` invoice (KABUL / RED) may be
answered, so their questions go on after GİB's final verdict — at most ``answer_poll_max_s``
apart — until the answer comes (``answered``) or the legal window closes (``unanswered``: 7 days
for a note, 8 for a commercial invoice, from acceptance). Each is a history event too
(``invoices_history_verdict_answer``). An answer never changes a number or a status.

The invoice stays ISSUED whatever GİB says: a refusal after acceptance is an operator's matter
(a new invoice, or a return), never a resend; the number stays accounted for. Each final verdict
(and giving up) is an ``invoice_events`` row, written by the trigger ``invoices_history_verdict``
(schema/current/gib.sql) in the statement that records it.

Each operation is one statement in its own transaction (:class:`gapless.ledger.database.Database`);
none is open while the integrator is asked (I5).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gapless.constants import Channel
from gapless.integrator.base import Answer, GibState
from gapless.ledger.database import Database
from gapless.ledger.queries import gib as q

if TYPE_CHECKING:
    from gapless.settings import Settings

#: What an operator does about a document GİB refused after acceptance (status, audit, docs).
REFUSED_TODO = ("issue a new invoice (or a return, if the refused one was delivered); never "
                "resend it — the number stays accounted for")
#: What an operator does about a document whose verdict recovery stopped waiting for.
UNRESOLVED_TODO = "look the document up in the integrator's portal; GİB gave no final verdict"
#: The detail recorded when the integrator does not know the document's UUID.
UNKNOWN_UUID = ("the integrator does not know the document's UUID (gapless audit --integrator "
                "compares both sides)")
#: Detail is one line of at most this many characters.
MAX_DETAIL = 500
#: The invoice profile whose receiver answers (KABUL / RED); every dispatch note is answered.
ANSWERED_PROFILE = "TICARIFATURA"


@dataclass(frozen=True)
class GibPolicy:
    """When to ask GİB's verdict about an ISSUED document (the ``GAPLESS_GIB_POLL_*`` settings).

    The first question ``first_s`` after acceptance; while the answer is pending, the next one
    after as long again as the document's age (so 1, 2, 4, 8 … minutes), capped per channel at
    ``max_efatura_s`` / ``max_earsiv_s`` (an e-Arşiv waits for GİB's nightly report), with a
    little jitter so documents accepted together are not asked together. A document still
    pending ``give_up_s`` after acceptance is given up: it stays ``pending`` with nothing due,
    and the history says so (``gib_unresolved``). ``batch``: questions claimed per recovery
    round (due ones, and as many never asked); ``lease_s``: how long a claimed question is held
    before another recovery may ask it (a claimer that died, or a call that failed).
    """

    first_s: float = 60.0
    max_efatura_s: float = 3600.0
    max_earsiv_s: float = 21600.0
    give_up_s: float = 7 * 86400.0
    batch: int = 100
    lease_s: float = 300.0
    #: The receiver's answer: the legal windows from acceptance, and the longest wait between
    #: questions while an answer may come.
    answer_window_despatch_s: float = 7 * 86400.0
    answer_window_invoice_s: float = 8 * 86400.0
    answer_poll_max_s: float = 3600.0

    @classmethod
    def from_settings(cls, settings: Settings) -> GibPolicy:
        return cls(first_s=settings.gib_poll_first_s,
                   max_efatura_s=settings.gib_poll_max_efatura_s,
                   max_earsiv_s=settings.gib_poll_max_earsiv_s,
                   give_up_s=settings.gib_poll_give_up_s, batch=settings.gib_poll_batch,
                   answer_window_despatch_s=settings.answer_window_despatch_s,
                   answer_window_invoice_s=settings.answer_window_invoice_s,
                   answer_poll_max_s=settings.answer_poll_max_s)

    def answer_window_s(self, check: GibCheck) -> float | None:
        """How long after acceptance the receiver may answer ``check``'s document; None when
        nobody answers it (an e-Arşiv, a TEMELFATURA…)."""
        if check.document == "despatch":
            return self.answer_window_despatch_s
        if check.profile == ANSWERED_PROFILE:
            return self.answer_window_invoice_s
        return None

    def next_answer_in(self, check: GibCheck) -> float | None:
        """Seconds until the next question about an answer ``check``'s document still awaits;
        None: no answer is awaited (none is due, it came, or the window closed)."""
        window = self.answer_window_s(check)
        if window is None or check.answer_status is not None or check.age_s >= window:
            return None
        delay = min(self.answer_poll_max_s, max(self.first_s, check.age_s))
        delay *= random.uniform(0.8, 1.0)  # jitter, not cryptography
        return min(delay, window - check.age_s)

    def cap_s(self, channel: str) -> float:
        return self.max_earsiv_s if channel == Channel.EARSIV else self.max_efatura_s

    def next_in(self, channel: str, age_s: float) -> float | None:
        """Seconds until the next question about a pending document accepted ``age_s`` ago;
        None: give up (it is ``give_up_s`` old). The last question falls at ``give_up_s``."""
        if age_s >= self.give_up_s:
            return None
        delay = min(self.cap_s(channel), max(self.first_s, age_s))
        delay *= random.uniform(0.8, 1.0)  # jitter, not cryptography
        return min(delay, self.give_up_s - age_s)


@dataclass(frozen=True)
class GibCheck:
    """A claimed question about one ISSUED document: held by the claimer until
    ``claimed_until`` (the fence of its answer's write)."""

    pk: int
    invoice_id: str
    tenant: str
    series: str
    number: str
    uuid: str
    #: The verdict recorded so far (None: never asked; else ``pending``).
    state: GibState | None
    claimed_until: datetime
    prev_due: datetime | None
    #: Seconds since the integrator accepted the document (the database's clock).
    age_s: float
    #: ``efatura``, ``earsiv`` or ``edespatch`` (from the series' channel or the pinned
    #: profile).
    channel: str
    #: ``invoice`` or ``despatch``, the invoice's pinned profile (None: the message named none),
    #: and whether the receiver's answer was recorded (``answered``, ``unanswered``) or not.
    document: str = "invoice"
    profile: str | None = None
    answer_status: str | None = None

def _check(row: Any) -> GibCheck:
    return GibCheck(row.id, row.invoice_id, row.tenant, row.series, row.number, str(row.uuid),
                    None if row.gib_status is None else GibState(row.gib_status),
                    row.claimed_until, row.prev_due, float(row.age_s), row.channel,
                    row.document, row.profile, row.answer_status)


async def claim_gib_checks(db: Database, policy: GibPolicy) -> list[GibCheck]:
    """Claim the due questions (at most ``policy.batch`` due and as many never asked; SKIP
    LOCKED), holding each for ``policy.lease_s``; one statement, committed at once."""
    rows = await db.all(q.CLAIM_GIB_CHECKS, {
        "batch": policy.batch, "first_s": policy.first_s, "give_up_s": policy.give_up_s,
        "lease_s": policy.lease_s})
    return [_check(row) for row in rows]


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_DETAIL else line[:MAX_DETAIL - 1] + "…"


def answer_json(answer: Answer) -> dict[str, Any]:
    """The receiver's answer as it is stored and shown (the API's ``answer``): ``code``, ``at``
    (ISO 8601), and for a dispatch note its ``lines`` with quantities as decimal strings."""
    shown: dict[str, Any] = {"code": answer.code.value, "at": answer.at.isoformat()}
    if answer.lines is not None:
        shown["lines"] = [{"line": line.line, "received": str(line.received),
                           "short": str(line.short), "rejected": str(line.rejected),
                           "reason": line.reason} for line in answer.lines]
    return shown


async def record_gib_status(db: Database, check: GibCheck, state: GibState,
                            detail: str, next_in_s: float | None, *,
                            answer: Answer | None = None, unanswered: bool = False) -> bool:
    """Record an answer: ``state`` with the integrator's ``detail``, the next question in
    ``next_in_s`` seconds (None: none — final, or given up), and the receiver's ``answer`` when
    it came (or ``unanswered``: its window closed). A final verdict, giving up, an answer or its
    absence writes its history event in the same statement. False when the claim was taken over
    by another claimer (its lease ran out) and this answer is not written."""
    status = "answered" if answer is not None else "unanswered" if unanswered else None
    row = await db.one(q.RECORD_GIB_STATUS, {
        "pk": check.pk, "claimed_until": check.claimed_until, "state": state.value,
        "detail": _one_line(detail), "next_s": next_in_s,
        "answer": None if answer is None else json.dumps(answer_json(answer),
                                                         ensure_ascii=False),
        "answer_status": status})
    return row is not None


async def release_gib_check(db: Database, check: GibCheck) -> bool:
    """Put a claimed question back as it was (nobody asked). Fenced like the answer."""
    row = await db.one(q.RELEASE_GIB_CHECK, {
        "pk": check.pk, "claimed_until": check.claimed_until, "prev_due": check.prev_due})
    return row is not None
