"""Names shared by every process: queues, headers, priorities, statuses."""

from __future__ import annotations

from enum import StrEnum

PRIORITY_USER = 4
PRIORITY_BATCH = 1
MAX_PRIORITY = 4
PRIORITIES = {"user": PRIORITY_USER, "batch": PRIORITY_BATCH}

DEAD_SUFFIX = ".dead"
DLX_SUFFIX = ".dlx"

HEADER_DEAD_REASON = "x-gapless-reason"
HEADER_DEAD_AT = "x-gapless-dead-at"
HEADER_DEAD_WORKER = "x-gapless-worker"
#: Set by ``gapless dead replay`` on a message put back on the main queue (UTC ISO time).
HEADER_REPLAYED_AT = "x-gapless-replayed-at"

CONTENT_TYPE_JSON = "application/json"


def dead_queue_name(prefix: str) -> str:
    return prefix + DEAD_SUFFIX


def dead_exchange_name(prefix: str) -> str:
    return prefix + DLX_SUFFIX


class Status(StrEnum):
    RECEIVED = "RECEIVED"
    SENDING = "SENDING"
    ISSUED = "ISSUED"
    ERROR = "ERROR"
    REJECTED = "REJECTED"
    CANCELLED = "CANCELLED"
    VOIDED = "VOIDED"


TERMINAL_STATUSES = frozenset({Status.ISSUED, Status.CANCELLED, Status.VOIDED})

# Every state change the database accepts (enforced by a trigger in schema/ as well).
ALLOWED_TRANSITIONS: frozenset[tuple[Status, Status]] = frozenset(
    {
        (Status.RECEIVED, Status.SENDING),
        (Status.RECEIVED, Status.CANCELLED),
        (Status.SENDING, Status.SENDING),
        (Status.SENDING, Status.ISSUED),
        (Status.SENDING, Status.ERROR),
        (Status.SENDING, Status.REJECTED),
        (Status.ERROR, Status.SENDING),
        (Status.ERROR, Status.ERROR),
        (Status.ERROR, Status.ISSUED),
        (Status.ERROR, Status.VOIDED),
        (Status.REJECTED, Status.SENDING),
        (Status.REJECTED, Status.VOIDED),
    }
)


class ResetPeriod(StrEnum):
    NEVER = "never"
    YEARLY = "yearly"
    MONTHLY = "monthly"
    DAILY = "daily"
