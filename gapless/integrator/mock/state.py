"""The mock integrator's state: its ledger of accepted documents (invoices and dispatch notes), the
recipients it knows (e-Fatura and e-İrsaliye aliases), GİB's verdicts, the receivers' answers, the
faults in force and their seeded random streams. Plain Python: no HTTP here
(:mod:`gapless.integrator.mock.app` serves it).

The ledger is keyed by (tenant, number) and kept in acceptance order for the life of the process.
:meth:`MockState.accept` is synchronous: a caller that checks a number free and accepts it without
an ``await`` in between is atomic with respect to every other request of the event loop. What the
mock checks in a document and how it refuses: docs/mock.md.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from lxml import etree
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gapless.constants import EARSIV_PROFILE

#: Customers with this tax id are always rejected (422), whatever the fault settings.
REJECTED_TAX_ID = "0000000000"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
UUID_RE = re.compile(UUID_PATTERN)
UBL_INVOICE = "{urn:oasis:names:specification:ubl:schema:xsd:Invoice-2}Invoice"
UBL_DESPATCH = ("{urn:oasis:names:specification:ubl:schema:xsd:DespatchAdvice-2}"
                "DespatchAdvice")
#: What kind of document the mock accepted: a UBL-TR ``DespatchAdvice`` is a dispatch note,
#: anything else (a UBL-TR Invoice, the message's JSON) an invoice.
DocumentKind = Literal["invoice", "despatch"]
#: GİB's box: where a dispatch note to someone who is not an e-İrsaliye user goes.
GIB_DESPATCH_BOX = "urn:mail:irsaliyepk@gib.gov.tr"
#: The one invoice profile a receiver answers (KABUL / RED, ApplicationResponse).
ANSWERED_INVOICE_PROFILE = "TICARIFATURA"
_UBL_NS = {"cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
           "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"}
#: The largest ``POST /invoices`` body the mock reads (413 beyond).
MAX_BODY_BYTES = 16 * 1024 * 1024
_XML_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
LostResponseMode = Literal["500", "drop", "timeout", "mixed"]
#: A hostile answer: its status kept, its body nested 100 000 deep, over 2 MiB, or not JSON.
HostileAnswer = Literal["none", "deep", "huge", "garbage"]
LOST_MODES: tuple[Literal["500", "drop", "timeout"], ...] = ("500", "drop", "timeout")
#: Business reasons a random rejection picks from (never the tax id itself).
REJECT_REASONS = (
    "invalid tax id",
    "customer not registered for e-invoice",
    "line total does not match",
    "issue date outside the allowed window",
)


class Faults(BaseModel):
    """The failure behaviour in force. Every rate is a probability per integrator call."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    latency_ms: tuple[float, float] = (0.0, 0.0)
    transient_rate: float = Field(0.0, ge=0.0, le=1.0)
    reject_rate: float = Field(0.0, ge=0.0, le=1.0)
    lost_response_rate: float = Field(0.0, ge=0.0, le=1.0)
    lost_response_mode: LostResponseMode = "500"
    #: How long a "timeout" lost response withholds its answer (the client should give up first).
    lost_response_delay_s: float = Field(60.0, ge=0.0)
    down: bool = False
    #: Refuse our credentials: 401 to every non-admin call (a configuration error at the
    #: integrator, e.g. a revoked API key).
    unauthorized: bool = False
    #: Every integrator answer (not ``/admin``, not ``/ledger``) made hostile: the call is
    #: handled as usual (a send is recorded), then its body replaced.
    hostile_answer: HostileAnswer = "none"

    @field_validator("latency_ms")
    @classmethod
    def _latency_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if low < 0 or high < low:
            raise ValueError("latency_ms must be [min, max] with 0 <= min <= max")
        return value


class FaultsPatch(BaseModel):
    """``PUT /admin/faults``: any subset of the fault fields."""

    model_config = ConfigDict(extra="forbid")

    latency_ms: tuple[float, float] | None = None
    transient_rate: float | None = None
    reject_rate: float | None = None
    lost_response_rate: float | None = None
    lost_response_mode: LostResponseMode | None = None
    lost_response_delay_s: float | None = None
    down: bool | None = None
    unauthorized: bool | None = None
    hostile_answer: HostileAnswer | None = None

    @model_validator(mode="after")
    def _no_nulls(self) -> FaultsPatch:
        given = self.model_dump(exclude_unset=True)
        if any(value is None for value in given.values()):
            raise ValueError("fault fields cannot be null")
        return self


GibStateName = Literal["accepted", "refused", "pending"]
#: The key of ``PUT /admin/gib-status`` that sets the verdict of every document without its own.
GIB_DEFAULT_KEY = "*"
GIB_DETAILS: dict[str, str] = {"accepted": "accepted by GİB (mock)",
                               "refused": "refused by GİB (mock)",
                               "pending": "waiting for GİB (mock)"}


class GibVerdict(BaseModel):
    """GİB's verdict on an accepted document, as the mock will answer it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: GibStateName
    detail: str | None = Field(None, max_length=300)

    def as_json(self) -> dict[str, str]:
        return {"state": self.state, "detail": self.detail or GIB_DETAILS[self.state]}


class Submission(BaseModel):
    """``POST /invoices``: ``document`` is UBL-TR XML (a string) or the message's JSON."""

    tenant: str = Field(min_length=1)
    number: str = Field(min_length=1)
    invoice_id: str = Field(min_length=1)
    uuid: str | None = Field(None, pattern=UUID_PATTERN)
    document: dict[str, Any] | str = Field(default_factory=dict)
    alias: str | None = Field(None, min_length=1, max_length=256)


class RecipientAliases(BaseModel):
    """``PUT /admin/recipients``, the object form: a tax id's e-Fatura (``invoice``) and
    e-İrsaliye (``despatch``) aliases, each kind optional (absent: unchanged; an empty list:
    unregistered)."""

    model_config = ConfigDict(extra="forbid")

    invoice: list[str] | None = None
    despatch: list[str] | None = None

    @model_validator(mode="after")
    def _a_kind_given(self) -> RecipientAliases:
        given = self.model_dump(exclude_unset=True)
        if not given:
            raise ValueError("name the aliases of 'invoice', 'despatch' or both")
        if any(value is None for value in given.values()):
            raise ValueError("aliases cannot be null (an empty list unregisters)")
        return self


AnswerCodeName = Literal["KABUL", "RED", "KISMIKABUL"]
#: A quantity of an answer's line: a non-negative decimal string.
QUANTITY_PATTERN = r"^[0-9]{1,15}(\.[0-9]{1,6})?$"


class AnswerLine(BaseModel):
    """One line of a dispatch note's answer (ReceiptAdvice): how much of line ``line`` arrived,
    was short, was rejected, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    line: int = Field(ge=1, le=100_000)
    received: str = Field(pattern=QUANTITY_PATTERN)
    short: str = Field("0", pattern=QUANTITY_PATTERN)
    rejected: str = Field("0", pattern=QUANTITY_PATTERN)
    reason: str | None = Field(None, min_length=1, max_length=500)


class AnswerGiven(BaseModel):
    """``PUT /admin/answers``: a receiver's answer to one accepted document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: AnswerCodeName
    lines: tuple[AnswerLine, ...] | None = Field(None, max_length=100_000)

    @model_validator(mode="after")
    def _lines_once_each(self) -> AnswerGiven:
        numbers = [line.line for line in self.lines or ()]
        if len(numbers) != len(set(numbers)):
            raise ValueError("a line is answered at most once")
        if self.code == "KISMIKABUL" and not numbers:
            raise ValueError("KISMIKABUL answers the dispatch note line by line: lines required")
        return self


@dataclass(frozen=True)
class ReceivedAnswer:
    """A receiver's answer as the integrator reports it (``at``: when it arrived)."""

    code: AnswerCodeName
    at: str
    #: A dispatch note's lines (perhaps none); None for an invoice.
    lines: tuple[AnswerLine, ...] | None

    @classmethod
    def of(cls, kind: DocumentKind, given: AnswerGiven, at: str) -> ReceivedAnswer:
        return cls(given.code, at, None if kind == "invoice" else (given.lines or ()))

    def as_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"code": self.code, "at": self.at}
        if self.lines is not None:
            answer["lines"] = [line.model_dump() for line in self.lines]
        return answer


@dataclass(frozen=True)
class LedgerEntry:
    tenant: str
    number: str
    invoice_id: str
    uuid: str | None
    ref: str
    accepted_at: str
    #: The document exactly as accepted (XML text, or the JSON object).
    document: dict[str, Any] | str
    alias: str | None = None
    kind: DocumentKind = "invoice"
    #: A UBL-TR document's ``cbc:ProfileID`` (None for a JSON document).
    profile: str | None = None

    def as_json(self) -> dict[str, str | None]:
        return {"tenant": self.tenant, "number": self.number, "invoice_id": self.invoice_id,
                "uuid": self.uuid, "ref": self.ref, "accepted_at": self.accepted_at,
                "alias": self.alias, "document": self.kind}


@dataclass
class LatencyStats:
    """Summary of the latencies drawn so far (what the mock meant to wait, in ms)."""

    count: int = 0
    low: float = 0.0
    high: float = 0.0
    total: float = 0.0

    def add(self, latency_ms: float) -> None:
        self.low = latency_ms if self.count == 0 else min(self.low, latency_ms)
        self.high = max(self.high, latency_ms)
        self.total += latency_ms
        self.count += 1

    def as_json(self) -> dict[str, float | int | None]:
        if self.count == 0:
            return {"count": 0, "min": None, "max": None, "mean": None}
        return {"count": self.count, "min": self.low, "max": self.high,
                "mean": self.total / self.count}


@dataclass(frozen=True)
class Draws:
    """One request's fate, drawn before it is handled."""

    latency_s: float
    transient: bool
    reject: bool
    lost: bool


class MockState:
    """Ledger, faults, statistics and the seeded random streams of one mock integrator."""

    def __init__(self, faults: Faults | None = None, seed: int | None = None) -> None:
        self.faults = faults or Faults()
        self.seed = seed
        self.ledger: dict[tuple[str, str], LedgerEntry] = {}  # insertion order = acceptance order
        self.uuids: dict[tuple[str, str], LedgerEntry] = {}  # (tenant, lower-case uuid)
        self.by_uuid: dict[str, list[LedgerEntry]] = {}  # lower-case uuid, every tenant
        #: Registered e-Fatura users and their aliases, the tax ids unregistered by name, and
        #: the e-İrsaliye users with their aliases (configuration: kept by reset()).
        self.recipients: dict[str, tuple[str, ...]] = {}
        self.unregistered: set[str] = set()
        self.despatch_recipients: dict[str, tuple[str, ...]] = {}
        #: The receivers' answers per lower-case UUID (about accepted documents: reset() forgets
        #: them with the ledger).
        self.answers: dict[str, ReceivedAnswer] = {}
        #: GİB's verdict per lower-case UUID, and for every other document (configuration).
        self.gib_verdicts: dict[str, GibVerdict] = {}
        self.gib_default = GibVerdict(state="accepted")
        self.stats: Counter[str] = Counter()
        self.posts_per_number: Counter[str] = Counter()
        self.latency = LatencyStats()
        self._refs = 0
        self._reseed()

    def _reseed(self) -> None:
        # One stream per fault kind: changing one rate never shifts the draws of another.
        base = str(self.seed) if self.seed is not None else str(random.SystemRandom().random())
        self._rng_latency = random.Random(f"{base}:latency")
        self._rng_transient = random.Random(f"{base}:transient")
        self._rng_reject = random.Random(f"{base}:reject")
        self._rng_lost = random.Random(f"{base}:lost")
        self._rng_choice = random.Random(f"{base}:choice")

    def reset(self) -> None:
        """Forget the ledger (and the answers to its documents) and the statistics; re-seed the
        random streams. Faults, recipients and GİB's verdicts stay."""
        self.ledger.clear()
        self.uuids.clear()
        self.by_uuid.clear()
        self.answers.clear()
        self.stats.clear()
        self.posts_per_number.clear()
        self.latency = LatencyStats()
        self._refs = 0
        self._reseed()

    def draw(self) -> Draws:
        """Draw every fault of one integrator call, each from its own stream, in a fixed order."""
        faults = self.faults
        low, high = faults.latency_ms
        latency_s = 0.0
        if high > 0:
            latency_ms = self._rng_latency.uniform(low, high)
            latency_s = latency_ms / 1000.0
            self.latency.add(latency_ms)
        return Draws(
            latency_s=latency_s,
            transient=self._rng_transient.random() < faults.transient_rate,
            reject=self._rng_reject.random() < faults.reject_rate,
            lost=self._rng_lost.random() < faults.lost_response_rate,
        )

    def lost_mode(self) -> Literal["500", "drop", "timeout"]:
        mode = self.faults.lost_response_mode
        return self._rng_choice.choice(LOST_MODES) if mode == "mixed" else mode

    def reject_reason(self) -> str:
        return self._rng_choice.choice(REJECT_REASONS)

    def holder(self, tenant: str, number: str) -> LedgerEntry | None:
        return self.ledger.get((tenant, number))

    def uuid_holder(self, tenant: str, uuid: str | None) -> LedgerEntry | None:
        return None if uuid is None else self.uuids.get((tenant, uuid.lower()))

    def register(self, registered: dict[str, list[str] | RecipientAliases]) -> None:
        """Register recipients with their aliases, per tax id: a list is its e-Fatura aliases
        (replacing those it had; an empty list unregisters the tax id by name), an object its
        ``invoice`` and ``despatch`` aliases, each kind replaced when given (an empty list
        unregisters that kind)."""
        for tax_id, given in registered.items():
            if isinstance(given, list):
                self._register_invoice(tax_id, given)
                continue
            if given.invoice is not None:
                self._register_invoice(tax_id, given.invoice)
            if given.despatch is not None:
                _set_aliases(self.despatch_recipients, tax_id, given.despatch)

    def _register_invoice(self, tax_id: str, aliases: list[str]) -> None:
        _set_aliases(self.recipients, tax_id, aliases)
        if aliases:
            self.unregistered.discard(tax_id)
        else:
            self.unregistered.add(tax_id)

    def set_verdicts(self, verdicts: dict[str, GibVerdict]) -> None:
        """Set GİB's verdict per UUID, and with the key ``GIB_DEFAULT_KEY`` the verdict of every
        document without one of its own. The caller has checked that every other key is a UUID
        (``UUID_RE``)."""
        for key, verdict in verdicts.items():
            if key == GIB_DEFAULT_KEY:
                self.gib_default = verdict
            else:
                self.gib_verdicts[key.lower()] = verdict

    def verdict(self, uuid: str) -> GibVerdict:
        """GİB's verdict on the document with ``uuid``: its own, else the default."""
        return self.gib_verdicts.get(uuid.lower(), self.gib_default)

    def answer(self, uuid: str) -> ReceivedAnswer | None:
        """The receiver's answer to the document with ``uuid`` (None: not answered)."""
        return self.answers.get(uuid.lower())

    def answer_problem(self, uuid: str, given: AnswerGiven) -> tuple[int, str] | None:
        """Why ``given`` cannot answer the document with ``uuid`` (HTTP status and reason), or
        None. Only an accepted document is answered: a dispatch note (line by line, its lines
        among the note's), or a ``TICARIFATURA`` invoice (KABUL or RED, no lines); a document
        already answered keeps its answer (the same answer again changes nothing)."""
        entries = self.by_uuid.get(uuid.lower())
        if not entries:
            return 404, "no accepted document has this UUID"
        for entry in entries:
            if entry.kind == "invoice":
                if entry.profile != ANSWERED_INVOICE_PROFILE:
                    return 422, "only a dispatch note or a TICARIFATURA invoice is answered"
                if given.code == "KISMIKABUL":
                    return 422, "an invoice is answered KABUL or RED"
                if given.lines is not None:
                    return 422, "an invoice's answer has no lines (lines: dispatch notes only)"
            elif given.lines:
                count = despatch_line_count(entry.document)
                beyond = [line.line for line in given.lines if line.line > count]
                if beyond:
                    return 422, (f"line {beyond[0]} is not a line of the dispatch note "
                                 f"(it has {count})")
        before = self.answers.get(uuid.lower())
        if before is not None and before != ReceivedAnswer.of(entries[0].kind, given,
                                                               before.at):
            return 409, "the document is already answered"
        return None

    def set_answers(self, answers: dict[str, AnswerGiven]) -> None:
        """Record the receivers' answers (the caller has checked each: ``answer_problem``); a
        document already answered keeps the moment of its first answer."""
        at = datetime.now(UTC).isoformat()
        for uuid, given in answers.items():
            key = uuid.lower()
            if key not in self.answers:
                self.answers[key] = ReceivedAnswer.of(self.by_uuid[key][0].kind, given, at)

    def accept(self, submission: Submission, kind: DocumentKind = "invoice",
               profile: str | None = None) -> LedgerEntry:
        """Record ``submission`` (a document of ``kind``, with its UBL-TR ``profile``) under a
        new ref. The caller has just seen the number (and the UUID) free.

        Synchronous on purpose: the caller checks ``holder`` and calls this without an ``await``
        in between, so no other request can take the number in the meantime.
        """
        key = (submission.tenant, submission.number)
        if key in self.ledger:
            raise RuntimeError("accept() called for a number already in the ledger")
        self._refs += 1
        entry = LedgerEntry(submission.tenant, submission.number, submission.invoice_id,
                            submission.uuid, f"MI-{self._refs:08d}",
                            datetime.now(UTC).isoformat(), submission.document,
                            submission.alias, kind, profile)
        self.ledger[key] = entry
        if submission.uuid is not None:
            self.uuids[(submission.tenant, submission.uuid.lower())] = entry
            self.by_uuid.setdefault(submission.uuid.lower(), []).append(entry)
        return entry

    def stats_json(self) -> dict[str, Any]:
        counts = {name: self.stats.get(name, 0) for name in STAT_NAMES}
        return {
            **counts,
            "lost_response_modes": {mode: self.stats.get(f"lost_response_{mode}", 0)
                                    for mode in LOST_MODES},
            "latency_ms": self.latency.as_json(),
            "ledger_size": len(self.ledger),
            "posts_per_number": dict(self.posts_per_number),
            "max_posts_per_number": max(self.posts_per_number.values(), default=0),
        }


#: Outcome counters of ``GET /admin/stats`` (every key is always present).
STAT_NAMES = ("posts", "accepted", "duplicate", "duplicate_uuid", "rejected",
              "rejected_tax_id", "rejected_document", "rejected_channel", "transient",
              "lost_response", "down", "unauthorized", "lookups", "lookups_found",
              "lookups_missing",
              "recipient_checks", "gib_status_checks", "hostile_answers",
              "accepted_despatch", "answers")


@dataclass(frozen=True)
class Examined:
    """What the mock reads of a document: its kind, the customer's tax id (and a UBL-TR
    document's profile), or why it refuses it."""

    tax_id: object = None
    problem: str | None = None
    profile: str | None = None
    kind: DocumentKind = "invoice"


#: Where each kind of UBL-TR document names its customer (the first identification: the
#: VKN/TCKN the renderer writes first).
_CUSTOMER_ID = {
    "invoice": "cac:AccountingCustomerParty/cac:Party/cac:PartyIdentification/cbc:ID",
    "despatch": "cac:DeliveryCustomerParty/cac:Party/cac:PartyIdentification/cbc:ID",
}
_ROOT_KINDS: dict[str, DocumentKind] = {UBL_INVOICE: "invoice", UBL_DESPATCH: "despatch"}


def _parse(document: str) -> Any:
    """The root element of a UBL-TR document (no entities, no network, no huge trees; the body
    is bounded by the route, ``MAX_BODY_BYTES``); raises ``etree.XMLSyntaxError``."""
    return etree.fromstring(document.encode(), _XML_PARSER)


def examine(submission: Submission) -> Examined:
    """Read the document's kind and the customer's tax id; for a UBL-TR document also check
    that it is a UBL Invoice or DespatchAdvice whose ID and UUID are the submitted number and
    UUID (``problem`` says what is wrong). A JSON document is an invoice."""
    document = submission.document
    if isinstance(document, dict):
        customer = document.get("customer")
        return Examined(customer.get("tax_id") if isinstance(customer, dict) else None)
    try:
        root = _parse(document)
    except etree.XMLSyntaxError:
        return Examined(problem="document is not well-formed XML")
    kind = _ROOT_KINDS.get(root.tag)
    if kind is None:
        return Examined(problem="document is not a UBL-TR Invoice or DespatchAdvice")
    number = root.findtext("cbc:ID", namespaces=_UBL_NS)
    uuid = root.findtext("cbc:UUID", namespaces=_UBL_NS)
    if number != submission.number:
        return Examined(problem="cbc:ID of the document differs from the submitted number")
    if submission.uuid is None or (uuid or "").lower() != submission.uuid.lower():
        return Examined(problem="cbc:UUID of the document differs from the submitted uuid")
    if kind == "despatch" and submission.alias is None:
        return Examined(problem="a dispatch note is sent to an alias: the receiver's "
                                "e-İrsaliye alias or GİB's box")
    tax_id = root.findtext(_CUSTOMER_ID[kind], namespaces=_UBL_NS)
    return Examined(tax_id, profile=root.findtext("cbc:ProfileID", namespaces=_UBL_NS),
                    kind=kind)


def despatch_line_count(document: dict[str, Any] | str) -> int:
    """How many ``cac:DespatchLine`` an accepted dispatch note has (its XML was parsed once
    already when it was accepted)."""
    if not isinstance(document, str):
        return 0
    return len(_parse(document).findall("cac:DespatchLine", namespaces=_UBL_NS))


def channel_problem(state: MockState, submission: Submission, examined: Examined) -> str | None:
    """Why a UBL-TR document goes through the wrong channel or alias for its recipient (None:
    it does not): the rules are in docs/mock.md, "Recipients" and "Dispatch notes"."""
    if examined.kind == "despatch":
        return _despatch_channel_problem(state, submission, examined)
    if examined.profile is None or not isinstance(examined.tax_id, str):
        return None
    aliases = state.recipients.get(examined.tax_id)
    if examined.profile == EARSIV_PROFILE:
        return "recipient is an e-Fatura user" if aliases is not None else None
    if aliases is None and (submission.alias is not None
                            or examined.tax_id in state.unregistered):
        return "recipient is not an e-Fatura user"
    if submission.alias is None or aliases is None:
        return None
    if submission.alias not in aliases:
        return "alias is not one of the recipient's aliases"
    return None


def _despatch_channel_problem(state: MockState, submission: Submission,
                              examined: Examined) -> str | None:
    """A dispatch note goes to one of an e-İrsaliye user's despatch aliases, or to GİB's box
    when the customer is not one (``examine`` has refused one without an alias)."""
    aliases = (state.despatch_recipients.get(examined.tax_id)
               if isinstance(examined.tax_id, str) else None)
    if aliases is None:
        if submission.alias != GIB_DESPATCH_BOX:
            return "recipient is not an e-İrsaliye user (a dispatch note goes to GİB's box)"
        return None
    if submission.alias == GIB_DESPATCH_BOX:
        return "recipient is an e-İrsaliye user"
    if submission.alias not in aliases:
        return "alias is not one of the recipient's e-İrsaliye aliases"
    return None


def _set_aliases(registered: dict[str, tuple[str, ...]], tax_id: str,
                 aliases: Iterable[str]) -> None:
    """Replace ``tax_id``'s aliases (duplicates dropped, order kept); none: unregistered."""
    unique = tuple(dict.fromkeys(aliases))
    if unique:
        registered[tax_id] = unique
    else:
        registered.pop(tax_id, None)
