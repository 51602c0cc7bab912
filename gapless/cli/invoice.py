"""``gapless invoice show|list|retry|void|cancel``: what an operator does with one invoice, and
the list of the documents matching a filter, newest first.

Wrong state or unknown invoice: one line, exit 1. Bad usage (a payload that is not valid JSON or
not a valid message, an empty reason, an ``invoice_id`` several tenants hold and no ``--tenant``):
one line, exit 2. ``invoice_id`` is unique per tenant: without ``--tenant``, the one tenant that
holds the id is meant.
"""

from __future__ import annotations

import json
import sys
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from gapless.cli.options import DatabaseUrlOption, IntegratorUrlOption, run, settings_from
from gapless.cli.printable import console, echo, echo_json, json_text, plain
from gapless.constants import EARSIV_PROFILE, Channel, Status
from gapless.settings import Settings

if TYPE_CHECKING:
    from gapless.ledger.database import Database

invoice_app = typer.Typer(help="Inspect and act on one invoice (by its invoice_id).",
                          no_args_is_help=True)

InvoiceIdArgument = typer.Argument(..., metavar="ID", help="The invoice's invoice_id.")
TenantOption = typer.Option(
    None, "--tenant", help="The invoice's tenant; needed only when several tenants hold the id.")


def _database(settings: Settings) -> AbstractAsyncContextManager[Database]:
    """The command's database (actor ``operator``), closed when the block ends."""
    from gapless.ledger.database import short_lived

    return short_lived(settings.database_url, actor="operator", pool_size=2)


async def _tenant(db: Database, invoice_id: str, tenant: str | None) -> str:
    """The tenant of the invoice the command names: ``--tenant``, or the one tenant holding the
    id. An id several tenants hold without ``--tenant`` is a usage error (exit 2) naming them;
    none: InvoiceNotFound (exit 1)."""
    from gapless.cli import UsageError
    from gapless.errors import AmbiguousInvoice
    from gapless.ledger.invoices import resolve_tenant

    try:
        return await resolve_tenant(db, invoice_id, tenant)
    except AmbiguousInvoice as exc:
        raise UsageError(str(exc)) from None


# ------------------------------------------------------------------------------------- show


@invoice_app.command("show")
def show(
    invoice_id: str = InvoiceIdArgument,
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    with_payload: bool = typer.Option(False, "--with-payload",
                                      help="Include the stored payload (the producer's message)."),
    document: bool = typer.Option(
        False, "--document",
        help="Print the document sent (UBL-TR XML or JSON), byte for byte, and nothing else."),
    tenant: str | None = TenantOption,
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """State, number, UUID, document type and profile (and, for a return, the invoices it
    returns), attempts, last error, integrator reference and the event history."""
    settings = settings_from(database_url=database_url)
    if document:
        body, note = run(_document(settings, invoice_id, tenant))
        if note:
            echo(note, err=True)
        # The document byte for byte (the one output not made printable: it is what was sent).
        sys.stdout.buffer.write(body)
        if not body.endswith(b"\n"):
            sys.stdout.buffer.write(b"\n")
        sys.stdout.buffer.flush()
        return
    row, events, sent = run(_load(settings, invoice_id, tenant))
    kind = document_kind(_payload(row), sent)
    if as_json:
        echo_json(_as_dict(row, events, kind, with_payload=with_payload), indent=2)
        return
    _print_invoice(row, events, kind, with_payload=with_payload)


async def _document(settings: Settings, invoice_id: str,
                    tenant: str | None) -> tuple[bytes, str | None]:
    """The document in force: the stored bytes, or — sealed, not sent yet — what the next send
    will send (rendered now, said on stderr). Exit 1 when the invoice has no number yet."""
    from gapless.issuing.render import Renderer, RenderError
    from gapless.ledger.catalog import Catalog
    from gapless.ledger.invoices import invoice_as_sent

    async with _database(settings) as db:
        sending = await invoice_as_sent(db, invoice_id,
                                        tenant=await _tenant(db, invoice_id, tenant))
        if sending is None:
            echo(f"invoice {invoice_id!r} has no number yet, so no document", err=True)
            raise typer.Exit(1)
        try:
            document = await Renderer(Catalog(db)).document(sending)
        except RenderError as exc:
            echo(f"invoice {invoice_id!r}: {exc}", err=True)
            raise typer.Exit(1) from None
        if document.stored:
            return document.body, None
        return document.body, (f"invoice {invoice_id!r} has sent no document yet; this is the "
                               f"one its next send sends (sha256 {document.sha256})")


async def _load(settings: Settings, invoice_id: str,
                tenant: str | None) -> tuple[Any, list[Any], bytes | None]:
    """The invoice row, its history, and the UBL-TR document in force (None: it sent none yet,
    or its documents are JSON)."""
    from gapless.integrator.base import MEDIA_XML
    from gapless.ledger.invoices import get_invoice, invoice_events, stored_document

    # One snapshot: the history and the document match the state shown.
    async with _database(settings) as db, db.snapshot() as snap:
        row = await get_invoice(snap, invoice_id, tenant=await _tenant(snap, invoice_id, tenant))
        events = await invoice_events(snap, row.id)
        body = None
        if row.document_sha256 is not None:
            stored = await stored_document(snap, row.id, row.document_sha256)
            if stored is not None and stored.media_type == MEDIA_XML:
                body = bytes(stored.body)
        return row, events, body


def _payload(row: Any) -> dict[str, Any]:
    payload = row.payload
    if isinstance(payload, str | bytes):
        payload = json.loads(payload)
    return payload if isinstance(payload, dict) else {}


@dataclass(frozen=True)
class DocumentKind:
    """What kind of document an invoice is, for people: an invoice or a dispatch note
    (``document``), its type and profile (from the stored message: none named is a SATIS, a
    TEMELFATURA; a dispatch note's a SEVK, a TEMELIRSALIYE), the invoices it returns (a return's
    ``billing_reference``), and — from its UBL-TR document, once it sent one — the discounts and
    the withheld VAT (None when the document has none)."""

    type: str
    profile: str
    billing_reference: list[dict[str, Any]]
    discounts: str | None = None
    withheld: str | None = None
    #: The recipient's alias the document goes to (pinned by routing, or the producer's): an
    #: e-Fatura alias, a dispatch note's e-İrsaliye alias or GİB's box; None for an e-Arşiv or
    #: a document without one.
    alias: str | None = None
    document: str = "invoice"

    @property
    def channel(self) -> str:
        """``edespatch`` for a dispatch note; ``earsiv`` for an EARSIVFATURA, ``efatura`` for
        every other profile."""
        if self.document == "despatch":
            return Channel.EDESPATCH.value
        return Channel.EARSIV.value if self.profile == EARSIV_PROFILE else Channel.EFATURA.value

    @property
    def returns(self) -> list[str]:
        """One "NUMBER of DATE" per returned invoice."""
        return [f"{ref.get('number')} of {ref.get('issue_date')}"
                for ref in self.billing_reference]


def _nonzero(amount: str | None) -> str | None:
    """A summary's "12.50 TRY", or None for no amount or a zero one."""
    if not amount:
        return None
    try:
        value = Decimal(amount.split()[0])
    except (InvalidOperation, IndexError):
        return amount
    return None if value == 0 else amount


def document_kind(payload: dict[str, Any], document: bytes | None) -> DocumentKind:
    """The :class:`DocumentKind` of a stored message and its UBL-TR document (if any)."""
    from gapless.documents import summarize
    from gapless.message import INVOICE_TYPES, PROFILES
    from gapless.message.despatch import DEFAULT_PROFILE, DEFAULT_TYPE

    references = payload.get("billing_reference") or []
    billing_reference = [{"number": ref.get("number"), "issue_date": ref.get("issue_date")}
                         for ref in references if isinstance(ref, dict)]
    discounts = withheld = None
    if document is not None:
        summary = summarize(document)
        discounts = _nonzero(summary.get("discounts"))
        withheld = _nonzero(summary.get("withheld"))
    customer = payload.get("customer")
    alias = customer.get("alias") if isinstance(customer, dict) else None
    alias = alias if isinstance(alias, str) else None
    if payload.get("document") == "despatch":
        despatch = payload.get("despatch")
        despatch = despatch if isinstance(despatch, dict) else {}
        return DocumentKind(type=despatch.get("type") or DEFAULT_TYPE,
                            profile=despatch.get("profile") or DEFAULT_PROFILE,
                            billing_reference=[], alias=alias, document="despatch")
    return DocumentKind(type=payload.get("type") or INVOICE_TYPES[0],
                        profile=payload.get("profile") or PROFILES[0],
                        billing_reference=billing_reference, discounts=discounts,
                        withheld=withheld, alias=alias)


def _json_of(value: Any) -> Any:
    """A jsonb value as read (the driver may hand over its text)."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def answer_text(answer: dict[str, Any] | None, status: str | None) -> str:
    """The receiver's answer for people: ``KISMIKABUL at …; line 1: received 10, short 2,
    rejected 0``, ``none within the legal window``, or ``-`` (none yet, or nobody answers)."""
    if answer is None:
        return "none within the legal window" if status == "unanswered" else "-"
    parts = [f"{answer.get('code')} at {answer.get('at')}"]
    for line in answer.get("lines") or ():
        reason = f" ({line.get('reason')})" if line.get("reason") else ""
        parts.append(f"line {line.get('line')}: received {line.get('received')}, short "
                     f"{line.get('short')}, rejected {line.get('rejected')}{reason}")
    return "; ".join(parts)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _as_dict(row: Any, events: list[Any], kind: DocumentKind, *,
             with_payload: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": row.id, "invoice_id": row.invoice_id, "tenant": row.tenant, "series": row.series,
        "document": kind.document, "type": kind.type, "profile": kind.profile,
        "channel": kind.channel, "alias": kind.alias, "billing_reference": kind.billing_reference,
        "discounts": kind.discounts, "withheld": kind.withheld,
        "status": row.status, "priority": row.priority, "period_key": row.period_key,
        "reserved_no": row.reserved_no, "number": row.number, "uuid": str(row.uuid),
        "profile_version": row.profile_version, "document_sha256": row.document_sha256,
        "attempts": row.attempts, "last_error": row.last_error,
        "integrator_ref": row.integrator_ref, "answer": _json_of(row.answer),
        "answer_status": row.answer_status,
        "reserved_at": _iso(row.reserved_at), "sending_since": _iso(row.sending_since),
        "next_attempt_at": _iso(row.next_attempt_at), "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at), "issued_at": _iso(row.issued_at),
        "events": [{"sequence_id": e.sequence_id, "kind": e.kind, "from_status": e.from_status,
                    "to_status": e.to_status, "number": e.number, "attempts": e.attempts,
                    "detail": e.detail, "actor": e.actor, "created_at": _iso(e.created_at),
                    "document_sha256": e.document_sha256}
                   for e in events],
    }
    if with_payload:
        data["payload"] = row.payload
    return data


def _print_invoice(row: Any, events: list[Any], kind: DocumentKind, *,
                   with_payload: bool) -> None:
    """The invoice for a person; every value from the ledger (ids, reasons, the payload) is
    shown as text (:func:`gapless.cli.printable.console`)."""
    out = console()
    facts = Table(show_header=False, box=None, title=f"invoice {row.invoice_id}",
                  title_justify="left")
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    number = "-" if row.number is None else (
        f"{row.number} (no {row.reserved_no}, period {row.period_key})")
    facts.add_row("id", str(row.id))
    facts.add_row("tenant/series", f"{row.tenant}/{row.series}")
    facts.add_row("type/profile", f"{kind.type}/{kind.profile}"
                  + (" (dispatch note)" if kind.document == "despatch" else ""))
    facts.add_row("channel", kind.channel + (f" to {kind.alias}" if kind.alias else ""))
    if kind.billing_reference:
        facts.add_row("returns", Text("\n").join(plain(line) for line in kind.returns))
    if kind.discounts is not None:
        facts.add_row("discounts", kind.discounts)
    if kind.withheld is not None:
        facts.add_row("withheld VAT", kind.withheld)
    facts.add_row("status", row.status)
    facts.add_row("number", number)
    facts.add_row("uuid (ETTN)", str(row.uuid))
    facts.add_row("document", "-" if row.document_sha256 is None else (
        f"sha256 {row.document_sha256}"
        + ("" if row.profile_version is None else f", issuer profile v{row.profile_version}")))
    facts.add_row("answer", answer_text(_json_of(row.answer), row.answer_status))
    facts.add_row("attempts", str(row.attempts))
    facts.add_row("last error", row.last_error or "-")
    facts.add_row("integrator ref", row.integrator_ref or "-")
    if row.sending_since is not None:
        facts.add_row("sending since", f"{row.sending_since:%Y-%m-%d %H:%M:%S %Z}")
    if row.next_attempt_at is not None:
        facts.add_row("next attempt", f"{row.next_attempt_at:%Y-%m-%d %H:%M:%S %Z}")
    facts.add_row("created", f"{row.created_at:%Y-%m-%d %H:%M:%S %Z}")
    facts.add_row("updated", f"{row.updated_at:%Y-%m-%d %H:%M:%S %Z}")
    out.print(facts)

    history = Table(title="events", title_justify="left")
    history.add_column("seq", justify="right")
    history.add_column("at")
    history.add_column("kind")
    history.add_column("change", overflow="fold")
    history.add_column("att", justify="right")
    history.add_column("actor")
    history.add_column("detail", overflow="fold")
    for e in events:
        same = e.from_status is None or e.from_status == e.to_status
        change = e.to_status if same else f"{e.from_status}->{e.to_status}"
        history.add_row("-" if e.sequence_id is None else str(e.sequence_id),
                        f"{e.created_at:%H:%M:%S}", e.kind, change, str(e.attempts), e.actor,
                        e.detail or "")
    out.print(history)
    if with_payload:
        for line in json_text(row.payload, indent=2, ensure_ascii=False).splitlines():
            out.print(line, soft_wrap=True)


# ------------------------------------------------------------------------------------- list

#: The time zone of a ``--since`` given without one (GİB's, the series' default).
SINCE_TZ = "Europe/Istanbul"
#: Statuses whose ``last_error`` is the reason the invoice is where it is (the list shows it).
REASON_STATUSES = frozenset({Status.ERROR, Status.REJECTED, Status.CANCELLED, Status.VOIDED})


def _statuses(values: list[str]) -> list[Status]:
    """``--status`` values as statuses (any case); a usage error names one that is not."""
    statuses = []
    for value in values:
        try:
            statuses.append(Status(value.strip().upper()))
        except ValueError:
            raise typer.BadParameter(
                f"--status: unknown status {value!r}; choose "
                f"{', '.join(status.value for status in Status)}") from None
    return statuses


def _since(value: str | None) -> datetime | None:
    """``--since`` as a moment: a date is its midnight, a time without an offset is read, in
    Europe/Istanbul; a usage error when it is neither."""
    from zoneinfo import ZoneInfo

    if value is None:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time(), ZoneInfo(SINCE_TZ))
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"--since: {value!r} is not a date (YYYY-MM-DD) or an ISO 8601 "
                                 "time (YYYY-MM-DDTHH:MM[:SS][+03:00])") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=ZoneInfo(SINCE_TZ))


@invoice_app.command("list")
def list_(
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant's documents."),
    status: list[str] = typer.Option(
        [], "--status", metavar="STATUS",
        help="Only documents in this status (RECEIVED, SENDING, ISSUED, ERROR, REJECTED, "
             "CANCELLED, VOIDED); repeat for several."),
    since: str | None = typer.Option(
        None, "--since", metavar="DATE",
        help="Only documents received at or after DATE (YYYY-MM-DD, midnight in "
             "Europe/Istanbul) or an ISO 8601 time."),
    answer: str | None = typer.Option(
        None, "--answer", metavar="ANSWER",
        help="Only documents whose receiver answered KABUL, RED or KISMIKABUL; none (not "
             "answered, or nobody answers them); unanswered (the legal window closed)."),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000,
                              help="At most this many, the newest; a line says when more match."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array on stdout."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """The documents matching, newest first: invoice_id, tenant, series, number, status, issue
    date, last change, and the reason of an ERROR, REJECTED, CANCELLED or VOIDED one."""
    statuses = _statuses(status)
    moment = _since(since)
    answered = _answer(answer)
    settings = settings_from(database_url=database_url)
    listing = run(_list(settings, tenant, statuses, moment, limit, answered))
    more = (f"showing the newest {limit}; more documents match (narrow with --tenant, --status "
            "or --since, or raise --limit)")
    if as_json:
        echo_json([_list_item(row) for row in listing.rows], indent=2)
        if listing.more:
            echo(more, err=True)
        return
    if not listing.rows:
        echo("no documents match")
        return
    _print_list(listing.rows)
    if listing.more:
        echo(more)


#: ``--answer`` values: the receiver's codes, and two states without one.
ANSWER_FILTERS = ("KABUL", "RED", "KISMIKABUL", "none", "unanswered")


def _answer(value: str | None) -> str | None:
    """``--answer`` as the list's filter (codes in any case); a usage error names a wrong one."""
    if value is None:
        return None
    for known in ANSWER_FILTERS:
        if value.strip().lower() == known.lower():
            return known
    raise typer.BadParameter(f"--answer: unknown answer {value!r}; choose "
                             f"{', '.join(ANSWER_FILTERS)}")


async def _list(settings: Settings, tenant: str | None, statuses: list[Status],
                since: datetime | None, limit: int, answer: str | None = None) -> Any:
    from gapless.ledger.invoices import list_invoices

    async with _database(settings) as db:
        return await list_invoices(db, tenant=tenant, statuses=statuses, since=since,
                                   limit=limit, answer=answer)


def _list_item(row: Any) -> dict[str, Any]:
    """One document of the list as JSON: the same keys for every document, in this order."""
    return {"id": row.id, "invoice_id": row.invoice_id, "tenant": row.tenant,
            "series": row.series, "number": row.number, "status": row.status,
            "issue_date": row.issue_date, "attempts": row.attempts,
            "last_error": row.last_error, "created_at": _iso(row.created_at),
            "updated_at": _iso(row.updated_at), "document": row.document,
            "answer": row.answer or row.answer_status}


def _print_list(rows: list[Any]) -> None:
    """The list as a table; every value from the ledger is shown as text."""
    table = Table(title="documents, newest first", title_justify="left")
    for column in ("invoice_id", "tenant", "series", "number", "status", "issue date",
                   "updated"):
        table.add_column(column, overflow="fold")
    table.add_column("reason or answer", overflow="fold")
    for row in rows:
        reason = row.last_error if row.status in REASON_STATUSES and row.last_error else ""
        # An ISSUED document has no reason: the column shows its receiver's answer, if any.
        table.add_row(row.invoice_id, row.tenant, row.series, row.number or "-", row.status,
                      row.issue_date or "-", f"{row.updated_at:%Y-%m-%d %H:%M:%S %Z}",
                      reason or row.answer or row.answer_status or "")
    console().print(table)


# ------------------------------------------------------------------------------------ retry


@invoice_app.command("retry")
def retry(
    invoice_id: str = InvoiceIdArgument,
    payload: Path | None = typer.Option(
        None, "--payload", exists=False, dir_okay=False,
        help="A corrected message (JSON) to send instead; it must keep invoice_id, tenant "
             "and series."),
    tenant: str | None = TenantOption,
    database_url: str | None = DatabaseUrlOption,
    integrator_url: str | None = IntegratorUrlOption,
) -> None:
    """REJECTED/ERROR -> send again with the same number (asking the integrator first)."""
    settings = settings_from(database_url=database_url, integrator_url=integrator_url)
    corrected = None if payload is None else _read_payload(payload)
    code, line = run(_retry(settings, invoice_id, corrected, tenant))
    echo(line)
    if code:
        raise typer.Exit(code)


async def _check_correction(catalog: Any, row: Any, corrected: dict[str, Any]) -> None:
    """A corrected payload keeps the invoice's identity, and — for an invoice sealed with an
    issuer profile — has what its UBL-TR document needs (usage error otherwise)."""
    from gapless.documents import check_inputs
    from gapless.message import InvalidMessage, validate_message

    for key in ("invoice_id", "tenant", "series"):
        if corrected.get(key) != getattr(row, key):
            raise typer.BadParameter(f"the corrected payload must keep {key} "
                                     f"{getattr(row, key)!r} (it has {corrected.get(key)!r})")
    if row.profile_version is None:
        return
    profile = await catalog.profile(row.tenant, row.profile_version)
    try:
        check_inputs(validate_message(corrected), profile.issuer)
    except InvalidMessage as exc:
        raise typer.BadParameter(f"the corrected payload cannot make the invoice's UBL-TR "
                                 f"document: {exc.reason}") from None


def _read_payload(path: Path) -> dict[str, Any]:
    from gapless.message import InvalidMessage, validate_message

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"{path} is not valid JSON: {exc}") from None
    try:
        message = validate_message(data)
    except InvalidMessage as exc:
        raise typer.BadParameter(f"{path} is not a valid invoice message: {exc.reason}") from None
    return message.payload()


async def _retry(settings: Settings, invoice_id: str, corrected: dict[str, Any] | None,
                 tenant: str | None = None) -> tuple[int, str]:
    from gapless.integrator.accounts import Accounts
    from gapless.issuing.render import Renderer
    from gapless.ledger.catalog import Catalog
    from gapless.ledger.invoices import get_invoice, start_retry
    from gapless.ops.doctor import probe_integrator
    from gapless.recovery.reconcile import Backoff, reconcile

    # An integrator that cannot answer fails the command before the invoice is touched (and
    # the report is the CLI's one line), rather than after it was moved to SENDING and back:
    # the tenant's account, once the tenant is known when GAPLESS_INTEGRATORS_FILE may give it
    # one of its own.
    asked = tenant
    if asked is not None or not settings.integrators_file:
        await probe_integrator(settings, asked)
    async with _database(settings) as db:
        catalog = Catalog(db)
        tenant = await _tenant(db, invoice_id, tenant)
        if asked is None and settings.integrators_file:
            await probe_integrator(settings, tenant)
        if corrected is not None:
            row = await get_invoice(db, invoice_id, tenant=tenant)
            await _check_correction(catalog, row, corrected)
        sending = await start_retry(db, invoice_id, corrected, tenant=tenant)
        guard = Accounts.open(settings, name="operator")
        try:
            # Without an orphan to put back, reconcile itself leaves the invoice ERROR, due
            # when the breaker may half-open, when nothing could be sent.
            result = await reconcile(db, guard, Renderer(catalog), sending,
                                     backoff=Backoff(), max_attempts=None,
                                     min_delay_s=settings.breaker_reset_timeout_s)
        finally:
            await guard.aclose()
    return _retry_answer(f"invoice {invoice_id!r} ({sending.number})", result)


def _retry_answer(where: str, result: Any) -> tuple[int, str]:
    """Exit code and the one line of ``gapless invoice retry`` for a reconcile result."""
    from gapless.recovery.reconcile import Outcome

    if result.outcome is Outcome.REPAIRED:
        return 0, f"{where}: ISSUED, the integrator already had it (ref {result.detail})"
    if result.outcome is Outcome.RESENT:
        return 0, f"{where}: ISSUED (ref {result.detail})"
    if result.outcome is Outcome.REJECTED:
        return 1, f"{where}: REJECTED again: {result.detail}"
    if result.outcome is Outcome.ALARM:
        return 1, f"{where}: ALARM, {result.detail}; left ERROR"
    if result.outcome in (Outcome.ERROR, Outcome.PARKED, Outcome.UNAVAILABLE):
        due = "" if result.retry_at is None else (
            f"; recovery retries after {result.retry_at:%H:%M:%S}")
        return 1, f"{where}: ERROR, the integrator did not answer ({result.detail}){due}"
    return 1, f"{where}: settled meanwhile by another process; see `gapless invoice show`"


# ------------------------------------------------------------------------------ void, cancel


@invoice_app.command("void")
def void(
    invoice_id: str = InvoiceIdArgument,
    reason: str = typer.Option(..., "--reason", help="Why the number is voided (recorded)."),
    tenant: str | None = TenantOption,
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """ERROR/REJECTED -> VOIDED with a reason; the number stays pinned and accounted for."""
    if not reason.strip():
        raise typer.BadParameter("--reason must not be empty")
    settings = settings_from(database_url=database_url)
    number = run(_void(settings, invoice_id, reason.strip(), tenant))
    echo(f"invoice {invoice_id!r}: VOIDED; number {number} stays accounted for")


async def _void(settings: Settings, invoice_id: str, reason: str, tenant: str | None) -> str:
    from gapless.ledger.invoices import get_invoice
    from gapless.ledger.invoices import void as void_invoice

    async with _database(settings) as db:
        tenant = await _tenant(db, invoice_id, tenant)
        await void_invoice(db, invoice_id, reason, tenant=tenant)
        return str((await get_invoice(db, invoice_id, tenant=tenant)).number)


@invoice_app.command("cancel")
def cancel(
    invoice_id: str = InvoiceIdArgument,
    reason: str = typer.Option("cancelled by operator", "--reason",
                               help="Why it is cancelled (recorded)."),
    tenant: str | None = TenantOption,
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """RECEIVED -> CANCELLED, only before a number is reserved (no number consumed)."""
    if not reason.strip():
        raise typer.BadParameter("--reason must not be empty")
    settings = settings_from(database_url=database_url)
    run(_cancel(settings, invoice_id, reason.strip(), tenant))
    echo(f"invoice {invoice_id!r}: CANCELLED; no number was consumed")


async def _cancel(settings: Settings, invoice_id: str, reason: str, tenant: str | None) -> None:
    from gapless.ledger.invoices import cancel as cancel_invoice

    async with _database(settings) as db:
        await cancel_invoice(db, invoice_id, reason,
                             tenant=await _tenant(db, invoice_id, tenant))


def register(app: typer.Typer) -> None:
    app.add_typer(invoice_app, name="invoice")
