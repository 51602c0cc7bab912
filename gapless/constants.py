"""Names shared by every process: queues, headers, priorities, statuses."""

from __future__ import annotations

from enum import StrEnum

PRIORITY_USER = 4
PRIORITY_BATCH = 1
MAX_PRIORITY = 4
PRIORITIES = {"user": PRIORITY_USER, "batch": PRIORITY_BATCH}

DEAD_SUFFIX = ".dead"
USER_SUFFIX = ".user"
DLX_SUFFIX = ".dlx"

HEADER_DEAD_REASON = "x-gapless-reason"
HEADER_DEAD_AT = "x-gapless-dead-at"
HEADER_DEAD_WORKER = "x-gapless-worker"
#: On a dead-letter copy whose original headers did not all fit its budget: what was cut.
HEADER_DEAD_HEADERS_CUT = "x-gapless-headers-cut"
#: Set by ``gapless dead replay`` on a message put back on the main queue (UTC ISO time).
HEADER_REPLAYED_AT = "x-gapless-replayed-at"

CONTENT_TYPE_JSON = "application/json"


def dead_queue_name(prefix: str) -> str:
    return prefix + DEAD_SUFFIX


def dead_exchange_name(prefix: str) -> str:
    return prefix + DLX_SUFFIX


def user_queue_name(prefix: str) -> str:
    """The queue of user work in quorum mode (quorum queues have no priorities)."""
    return prefix + USER_SUFFIX


class Status(StrEnum):
    RECEIVED = "RECEIVED"
    SENDING = "SENDING"
    ISSUED = "ISSUED"
    ERROR = "ERROR"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"
    VOIDED = "VOIDED"


TERMINAL_STATUSES = frozenset({Status.ISSUED, Status.CANCELLED, Status.VOIDED})

#: From each status, the statuses it may change to (a trigger in schema/ enforces the same).
NEXT_STATUSES: dict[Status, frozenset[Status]] = {
    Status.RECEIVED: frozenset({Status.SENDING, Status.CANCELLED}),
    Status.SENDING: frozenset({Status.SENDING, Status.ISSUED, Status.ERROR, Status.REJECTED}),
    Status.ERROR: frozenset({Status.SENDING, Status.ERROR, Status.ISSUED, Status.VOIDED}),
    Status.REJECTED: frozenset({Status.SENDING, Status.VOIDED}),
}

#: Every state change the database accepts, as (from, to) pairs.
ALLOWED_TRANSITIONS: frozenset[tuple[Status, Status]] = frozenset(
    (before, after) for before, nexts in NEXT_STATUSES.items() for after in nexts)

#: History events of GİB's verdict on an ISSUED document (ISSUED -> ISSUED: the status does not
#: change; schema/current/gib.sql): final verdicts, and giving up while still pending.
GIB_EVENT_KINDS = frozenset({"gib_accepted", "gib_refused", "gib_unresolved"})
#: History events of the receiver's answer to an ISSUED document (ISSUED -> ISSUED as well:
#: schema/current/gib.sql): answered, or the legal window closed without an answer.
ANSWER_EVENT_KINDS = frozenset({"answered", "unanswered"})


class Channel(StrEnum):
    """Which documents a series numbers: invoices by e-Fatura (to registered users), by e-Arşiv
    (to everyone else), or any (no routing: the producer chooses the profile); or dispatch notes
    (e-İrsaliye, and only they)."""

    ANY = "any"
    EFATURA = "efatura"
    EARSIV = "earsiv"
    EDESPATCH = "edespatch"


#: The profile of an e-Arşiv document; every other profile is an e-Fatura one.
EARSIV_PROFILE = "EARSIVFATURA"


class ResetPeriod(StrEnum):
    NEVER = "never"
    YEARLY = "yearly"
    MONTHLY = "monthly"
    DAILY = "daily"
