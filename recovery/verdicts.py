"""Follow GİB's verdict on ISSUED documents: one bounded batch of due questions per recovery round.

Per round (:func:`follow_verdicts`), when the adapter answers GİB's status and the breaker lets
calls through:

1. **Claim** (:func:`gapless.ledger.verdicts.claim_gib_checks`): due questions and documents never
asked,
   ``FOR UPDATE SKIP LOCKED``, each held for the policy's lease; the statement commits at once.
2. **Ask** each outside any transaction (I5), at most ``concurrency`` at a time, through the
   guard (breaker and retries, like every integrator call).
3. **Record** each answer in one short statement
(:func:`gapless.ledger.verdicts.record_gib_status`):
   accepted or refused is final (the history gets ``gib_accepted`` / ``gib_refused``); pending
   is asked again after the policy's backoff, or given up once the document is
   ``give_up_s`` old (``gib_unresolved``). An integrator that does not know the UUID is
   pending with that said. A call the breaker refused (or a stop) puts the question back
   untouched; a failed call leaves it to its lease (asked again after ``lease_s``).

The same answer carries the **receiver's answer** to a dispatch note or a ``TICARIFATURA``
invoice: it is recorded the first time it comes (``answered``), and such a document is asked
about after GİB's final verdict too, until its answer comes or its legal window closes
(``unanswered``; :meth:`gapless.ledger.verdicts.GibPolicy.next_answer_in`).

The invoice stays ISSUED: a refusal is an operator's matter (gapless status and audit list it).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter as Metric

from gapless.integrator.base import GibState, IntegratorError
from gapless.integrator.guard import Guard, IntegratorUnavailable
from gapless.ledger.database import Database
from gapless.ledger.verdicts import (
    UNKNOWN_UUID,
    GibCheck,
    GibPolicy,
    claim_gib_checks,
    record_gib_status,
    release_gib_check,
)
from gapless.logging import get_logger

log = get_logger("gapless.recovery")

#: What became of each claimed question.
RESULTS = ("accepted", "refused", "pending", "unresolved", "released", "failed", "superseded")
#: What the receiver's answer became, when one was awaited.
ANSWER_RESULTS = ("answered", "unanswered", "awaited")
ANSWERS = Metric("gapless_answer_checks_total",
                 "Receivers' answers learnt by recovery's questions, by result", ["result"])
for _result in ANSWER_RESULTS:
    ANSWERS.labels(result=_result)
CHECKS = Metric("gapless_gib_checks_total",
                "Questions about GİB's verdict on an ISSUED document, by result", ["result"])
for _result in RESULTS:
    CHECKS.labels(result=_result)


@dataclass
class VerdictSummary:
    claimed: int = 0
    results: Counter[str] = field(default_factory=Counter)
    #: The claim came back full: more questions are probably due.
    full: bool = False

    def line(self) -> str:
        """``GİB verdicts: accepted 1, refused 0, …`` (empty when nothing was claimed)."""
        if not self.claimed:
            return ""
        return "GİB verdicts: " + ", ".join(f"{name} {self.results.get(name, 0)}"
                                            for name in RESULTS)


def _gave_up_detail(policy: GibPolicy, detail: str) -> str:
    days = policy.give_up_s / 86400
    waited = f"{days:g} day(s)" if days >= 1 else f"{policy.give_up_s:g}s"
    return f"no final verdict from GİB after {waited}; last answer: {detail}"


async def _answer(db: Database, guard: Guard, policy: GibPolicy, check: GibCheck,
                  stopping: Callable[[], bool]) -> str:
    """Ask about one claimed document and record the answer; the result's name."""
    if stopping() or not guard.accepting(check.tenant):
        await release_gib_check(db, check)
        return "released"
    try:
        status = await guard.status(check.tenant, check.uuid)
    except IntegratorUnavailable:
        await release_gib_check(db, check)
        return "released"
    except IntegratorError as exc:
        log.warning("gib_status_failed", invoice_id=check.invoice_id, number=check.number,
                    error=type(exc).__name__, detail=str(exc))
        return "failed"  # asked again once the claim's lease runs out
    state, detail = ((GibState.PENDING, UNKNOWN_UUID) if status is None
                     else (status.state, status.detail))
    answer = None if status is None or check.answer_status is not None else status.answer
    if answer is not None and policy.answer_window_s(check) is None:
        answer = None  # a document nobody answers (an integrator's stray answer is not kept)
    verdict_next: float | None = None
    result = state.value
    if state is GibState.PENDING:
        verdict_next = policy.next_in(check.channel, check.age_s)
        if verdict_next is None:
            result, detail = "unresolved", _gave_up_detail(policy, detail)
    answer_next = None if answer is not None else policy.next_answer_in(check)
    awaited = answer_next is not None
    unanswered = (answer is None and check.answer_status is None
                  and policy.answer_window_s(check) is not None and not awaited)
    next_in_s = _sooner(verdict_next, answer_next)
    if result == "unresolved" and next_in_s is not None:
        result = "pending"  # GİB's verdict is given up once the answer's questions end too
    if not await record_gib_status(db, check, state, detail, next_in_s, answer=answer,
                                   unanswered=unanswered):
        return "superseded"
    if answer is not None or unanswered or awaited:
        answered = "answered" if answer is not None else "unanswered" if unanswered else "awaited"
        ANSWERS.labels(result=answered).inc()
        if answered != "awaited":
            log.info("receiver_answer", invoice_id=check.invoice_id, tenant=check.tenant,
                     number=check.number, answer=answered,
                     code=None if answer is None else answer.code.value)
    fields = {"invoice_id": check.invoice_id, "tenant": check.tenant, "number": check.number,
              "channel": check.channel, "gib_state": result}
    if result == "refused":
        log.warning("gib_refused", detail=detail, **fields)
    elif result == "unresolved":
        log.warning("gib_unresolved", detail=detail, **fields)
    else:
        log.info("gib_verdict", next_in_s=None if next_in_s is None else round(next_in_s, 1),
                 **fields)
    return result


def _sooner(first: float | None, second: float | None) -> float | None:
    """The sooner of two due delays (None: that one is not due at all)."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)


async def follow_verdicts(db: Database, guard: Guard, policy: GibPolicy, *,
                          concurrency: int, stopping: Callable[[], bool]) -> VerdictSummary:
    """One batch: claim the due questions, ask each (``concurrency`` at a time), record each
    answer; see the module docstring. Nothing is claimed for an adapter that cannot answer."""
    summary = VerdictSummary()
    if not guard.follows_gib_status or not guard.accepting() or stopping():
        return summary
    checks = await claim_gib_checks(db, policy)
    summary.claimed = len(checks)
    summary.full = len(checks) >= policy.batch
    gate = asyncio.Semaphore(concurrency)

    async def one(check: GibCheck) -> str:
        async with gate:
            try:
                return await _answer(db, guard, policy, check, stopping)
            except Exception as exc:
                # A database error while recording: the claim's lease brings it back.
                log.error("gib_status_record_failed", invoice_id=check.invoice_id,
                          error=type(exc).__name__, detail=str(exc))
                return "failed"

    for result in await asyncio.gather(*(one(check) for check in checks)):
        summary.results[result] += 1
        CHECKS.labels(result=result).inc()
    return summary
