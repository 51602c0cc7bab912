"""The API's response models (the OpenAPI schema); the feed's events are
:class:`gapless.ledger.feed.FeedEvent` itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import BaseModel, Field, create_model

from gapless.ledger.feed import FeedEvent


class Accepted(BaseModel):
    invoice_id: str
    status_url: str = Field(description="Poll this for the invoice's state (it names the "
                                        "tenant: invoice_id is unique per tenant).")
    published: bool = Field(description="False when the database already had the invoice "
                                        "past RECEIVED (nothing to publish again).")
    status: str | None = Field(description="The state the database knows, or null if none yet.")


class BatchItem(BaseModel):
    """One message of a batch: what ``POST /v1/invoices`` would have answered for it alone."""

    index: int = Field(description="The message's position in the batch (0-based).")
    invoice_id: str | None = Field(description="The message's invoice_id (null when the item "
                                                "is not a valid message).")
    status: int = Field(description="The single POST's answer for this message: 202 accepted; "
                                    "400 not a JSON object, 422 breaks the contract, 413 larger "
                                    "than a message may be, 403 another tenant's, 409 another "
                                    "series's invoice_id; 503 the broker did not confirm it.")
    published: bool = Field(description="True when this item was published now; false when it "
                                        "was refused, when the database already had the invoice "
                                        "past RECEIVED, or when an earlier item of the batch "
                                        "carried the same invoice.")
    status_url: str | None = Field(description="Poll this for the invoice's state (202 only).")
    invoice_status: str | None = Field(description="The state the database knows (202 only; "
                                                   "null if none yet): the single POST's "
                                                   "``status``.")
    error: str | None = Field(description="Why the item was refused: the single POST's "
                                          "``detail`` (null for 202).")


class BatchAccepted(BaseModel):
    results: list[BatchItem] = Field(description="One result per message, in the batch's order.")
    accepted: int = Field(description="How many results are 202.")
    published: int = Field(description="How many messages were published now.")


def _history_event_model() -> type[BaseModel]:
    """One entry of an invoice's history: a feed event (:class:`gapless.ledger.feed.FeedEvent`, one
    definition of its fields) without the invoice's own fields, with the document in force.
    ``sequence_id`` is null while the event waits for its feed position."""
    hints = get_type_hints(FeedEvent)
    fields: dict[str, Any] = {name: (hints[name], ...) for name in hints
                              if name not in ("invoice_id", "tenant", "series")}
    fields.update(
        sequence_id=(int | None, ...),
        created_at=(str, ...),
        document_sha256=(str | None, Field(
            description="SHA-256 of the document in force when this happened (none before the "
                        "first send)")))
    return create_model("EventOut", **fields)


if TYPE_CHECKING:
    class EventOut(BaseModel):
        """Built by :func:`_history_event_model`."""
else:
    EventOut = _history_event_model()


class AnswerLineOut(BaseModel):
    """One line of a dispatch note's answer: of line ``line``, the quantities received, short
    and rejected (decimal strings), and the receiver's reason."""

    line: int
    received: str
    short: str
    rejected: str
    reason: str | None


class AnswerOut(BaseModel):
    """The receiver's answer (docs/api.md): a dispatch note's e-İrsaliye Yanıtı or a
    TICARIFATURA invoice's KABUL/RED. It never changes the number or the status."""

    code: Literal["KABUL", "RED", "KISMIKABUL"]
    at: str = Field(description="When the receiver answered (ISO 8601)")
    lines: list[AnswerLineOut] | None = Field(
        None, description="Per line, for a dispatch note only")


class InvoiceOut(BaseModel):
    invoice_id: str
    tenant: str
    series: str
    document: Literal["invoice", "despatch"] = Field(
        description="The kind of document: an invoice or a dispatch note (e-İrsaliye)")
    status: str
    number: str | None
    reserved_no: int | None
    uuid: str = Field(description="The document's UUID (ETTN), fixed when the invoice was "
                                  "first stored; the same in every send.")
    document_sha256: str | None = Field(description="SHA-256 of the document sent (none "
                                                    "before the first send)")
    attempts: int
    last_error: str | None
    integrator_ref: str | None
    created_at: str
    updated_at: str
    reserved_at: str | None
    issued_at: str | None
    next_attempt_at: str | None
    answer: AnswerOut | None = Field(description="The receiver's answer; null until answered "
                                                 "(and for a document nobody answers)")
    events: list[EventOut]


class RefusedOut(BaseModel):
    """An invoice_id the worker refused before any number, and that has no invoice (yet): the
    newest refusal. Once the same invoice_id gets an invoice, the invoice is shown instead."""

    invoice_id: str
    tenant: str
    series: str | None = Field(description="The series the message named (null: none)")
    status: Literal["REFUSED"]
    reason: str = Field(description="Why it was refused: \"<field>: <reason>\"")
    refused_at: str


class FeedPage(BaseModel):
    results: list[FeedEvent]
    next: str | None = Field(description="The next page while this one was full; else null.")
    poll_more: str = Field(description="Ask this later for whatever commits after this page.")


class Health(BaseModel):
    database: str
    broker: str
