"""The mock integrator: a stand-in for the e-invoice integrator, and the test oracle for I1 and I7.

It speaks the "mock integrator HTTP API" of ARCHITECTURE.md and fails on demand in every way the
real one does, each fault drawn from its own seeded random stream so a run can be replayed:

- latency: every integrator call waits a uniform time in ``latency_ms``;
- transient: 503, nothing recorded;
- reject: 422 with a business reason, nothing recorded (a customer tax id ``0000000000`` is
  always rejected, so tests can force a permanent rejection);
- lost response: the document IS accepted and recorded, then the client gets a 500, a dropped
  connection, or no answer until it gives up (``lost_response_mode``);
- down: 503 for every non-admin endpoint.

Documents: a UBL-TR document (an XML string) is parsed (no entities, no network) and refused with
422 unless it is a UBL Invoice whose ``cbc:ID`` is the submitted number and whose ``cbc:UUID`` is
the submitted UUID; a UUID already accepted under another number answers 409. The document is
kept exactly as accepted and served at ``GET /invoices/{tenant}/{number}/document``.

Recipients (GİB's e-Fatura user list, as the integrator answers it): ``PUT /admin/recipients``
registers tax ids with their aliases, ``GET /recipients/{tax_id}`` answers the recipient check.
A UBL-TR document sent to the wrong channel is refused with 422 and ``code: wrong_channel``: an
``EARSIVFATURA`` to a registered user; an e-Fatura to a customer that is not registered — sent
to an ``alias`` (a routed one), or to a tax id unregistered by name (``PUT /admin/recipients``
with an empty list) — or to an alias that is not one of the customer's. An e-Fatura sent without
an alias to a tax id the mock was never told about comes from a series without routing (channel
``any``), as before routing existed: it is accepted.

GİB's verdict after acceptance: ``GET /invoices/{tenant}/by-uuid/{uuid}/status`` answers
``{state, detail}`` for an accepted document (404 for a UUID it does not hold): ``accepted``
unless ``PUT /admin/gib-status`` set another verdict for that UUID, or another default (key
``"*"``) — ``{"<uuid>": {"state": "refused", "detail": "..."}, "*": {"state": "pending"}}``.
Verdicts are configuration, like the recipients: they may be set before the document arrives,
and ``POST /admin/reset`` keeps them.

The ledger is keyed by (tenant, number) and kept in acceptance order for the life of the process.
Concurrency: one asyncio event loop in one process; the check-and-insert of a number runs without
an ``await`` in between, so it is atomic with respect to every other request.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from lxml import etree
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.requests import ClientDisconnect

from gapless.constants import EARSIV_PROFILE
from gapless.integrator.http import WRONG_CHANNEL
from gapless.logging import get_logger

log = get_logger("gapless.integrator.mock")

#: Customers with this tax id are always rejected (422), whatever the fault settings.
REJECTED_TAX_ID = "0000000000"
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_UUID = re.compile(UUID_PATTERN)
UBL_INVOICE = "{urn:oasis:names:specification:ubl:schema:xsd:Invoice-2}Invoice"
_UBL_NS = {"cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
           "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2"}
_XML_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
LostResponseMode = Literal["500", "drop", "timeout", "mixed"]
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

    def as_json(self) -> dict[str, str | None]:
        return {"tenant": self.tenant, "number": self.number, "invoice_id": self.invoice_id,
                "uuid": self.uuid, "ref": self.ref, "accepted_at": self.accepted_at,
                "alias": self.alias}


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
        #: Registered e-Fatura users and their aliases, and the tax ids unregistered by name
        #: (configuration: kept by reset()).
        self.recipients: dict[str, tuple[str, ...]] = {}
        self.unregistered: set[str] = set()
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
        """Forget the ledger and the statistics; re-seed the random streams. Faults stay."""
        self.ledger.clear()
        self.uuids.clear()
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

    def accept(self, submission: Submission) -> LedgerEntry:
        """Record ``submission`` under a new ref. The caller has just seen the number (and the
        UUID) free.

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
                            submission.alias)
        self.ledger[key] = entry
        if submission.uuid is not None:
            self.uuids[(submission.tenant, submission.uuid.lower())] = entry
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
              "recipient_checks", "gib_status_checks")


@dataclass(frozen=True)
class Examined:
    """What the mock reads of a document: the customer's tax id (and a UBL-TR document's
    profile), or why it refuses it."""

    tax_id: object = None
    problem: str | None = None
    profile: str | None = None


def examine(submission: Submission) -> Examined:
    """Read the customer's tax id; for a UBL-TR document also check that it is a UBL Invoice
    whose ID and UUID are the submitted number and UUID (``problem`` says what is wrong)."""
    document = submission.document
    if isinstance(document, dict):
        customer = document.get("customer")
        return Examined(customer.get("tax_id") if isinstance(customer, dict) else None)
    try:
        root = etree.fromstring(document.encode(), _XML_PARSER)
    except etree.XMLSyntaxError:
        return Examined(problem="document is not well-formed XML")
    if root.tag != UBL_INVOICE:
        return Examined(problem="document is not a UBL-TR Invoice")
    number = root.findtext("cbc:ID", namespaces=_UBL_NS)
    uuid = root.findtext("cbc:UUID", namespaces=_UBL_NS)
    if number != submission.number:
        return Examined(problem="cbc:ID of the document differs from the submitted number")
    if submission.uuid is None or (uuid or "").lower() != submission.uuid.lower():
        return Examined(problem="cbc:UUID of the document differs from the submitted uuid")
    tax_id = root.findtext("cac:AccountingCustomerParty/cac:Party/cac:PartyIdentification/"
                           "cbc:ID", namespaces=_UBL_NS)
    return Examined(tax_id, profile=root.findtext("cbc:ProfileID", namespaces=_UBL_NS))


def channel_problem(state: MockState, submission: Submission, examined: Examined) -> str | None:
    """Why a UBL-TR document goes through the wrong channel for its recipient (None: it does
    not): see the module docstring."""
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


def _unauthorized() -> JSONResponse:
    return JSONResponse({"error": "credentials refused"}, status_code=401)


def _unavailable() -> JSONResponse:
    return JSONResponse({"error": "integrator unavailable"}, status_code=503)


def _transient() -> JSONResponse:
    """A drawn transient fault: 503, the request not processed."""
    return JSONResponse({"error": "temporarily unavailable"}, status_code=503)


async def _client_gone(request: Request) -> None:
    """Return once the client has closed its connection (the request body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _lose_response(request: Request, state: MockState) -> JSONResponse:
    """The document is recorded; now fail to tell the client so."""
    mode = state.lost_mode()
    state.stats[f"lost_response_{mode}"] += 1
    if mode == "drop":
        abort = request.scope.get("extensions", {}).get("gapless.abort")
        if abort is not None:
            abort()
            # Wait until uvicorn has noticed, so the response below is discarded, not written.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_client_gone(request), timeout=5.0)
    elif mode == "timeout":
        delay = state.faults.lost_response_delay_s
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_client_gone(request), timeout=delay)
    return JSONResponse({"error": "response lost"}, status_code=500)


def _state(request: Request) -> MockState:
    state: MockState = request.app.state.mock
    return state


invoices = APIRouter()
admin = APIRouter(prefix="/admin")


@invoices.post("/invoices")
async def submit(request: Request) -> JSONResponse:
    """Accept a document under its number (or answer with the fault drawn for this call)."""
    state = _state(request)
    # Parsed here rather than by a FastAPI body parameter: a third of the CPU per request.
    try:
        body = await request.body()
    except ClientDisconnect:
        # The client went away mid-request (a killed worker): nothing arrived, nothing to do.
        return JSONResponse({"error": "client disconnected"}, status_code=400)
    try:
        submission = Submission.model_validate_json(body)
    except ValidationError as exc:
        return _invalid(exc)
    state.stats["posts"] += 1
    state.posts_per_number[f"{submission.tenant}/{submission.number}"] += 1
    if state.faults.down:
        state.stats["down"] += 1
        return _unavailable()
    if state.faults.unauthorized:
        state.stats["unauthorized"] += 1
        return _unauthorized()
    draws = state.draw()
    if draws.latency_s:
        await asyncio.sleep(draws.latency_s)
    if draws.transient:
        state.stats["transient"] += 1
        return _transient()
    refusal = _refusal(state, submission, draws)  # from here to accept(): no await
    if refusal is not None:
        return refusal
    accepted = state.accept(submission)
    state.stats["accepted"] += 1
    if draws.lost:
        state.stats["lost_response"] += 1
        return await _lose_response(request, state)
    return JSONResponse({"ref": accepted.ref}, status_code=201)


def _refusal(state: MockState, submission: Submission, draws: Draws) -> JSONResponse | None:
    """Why the submission is not accepted (409, 422), or None. Synchronous: the check and the
    insert that follows it are atomic with respect to every other request.

    A number already accepted answers 409 before any business check, so a resend of an accepted
    document is always recognisable as "mine"; so does a UUID accepted under another number.
    """
    holder = state.holder(submission.tenant, submission.number)
    if holder is not None:
        state.stats["duplicate"] += 1
        return _duplicate(holder, "number already accepted")
    holder = state.uuid_holder(submission.tenant, submission.uuid)
    if holder is not None:
        state.stats["duplicate_uuid"] += 1
        return _duplicate(holder, "uuid already accepted under another number")
    examined = examine(submission)
    if examined.problem is not None:
        state.stats["rejected"] += 1
        state.stats["rejected_document"] += 1
        return JSONResponse({"reason": examined.problem}, status_code=422)
    wrong_channel = channel_problem(state, submission, examined)
    if wrong_channel is not None:
        state.stats["rejected"] += 1
        state.stats["rejected_channel"] += 1
        return JSONResponse({"reason": wrong_channel, "code": WRONG_CHANNEL}, status_code=422)
    if examined.tax_id == REJECTED_TAX_ID:
        state.stats["rejected"] += 1
        state.stats["rejected_tax_id"] += 1
        return JSONResponse({"reason": "invalid tax id"}, status_code=422)
    if draws.reject:
        state.stats["rejected"] += 1
        return JSONResponse({"reason": state.reject_reason()}, status_code=422)
    return None


class _Answer(Exception):
    """Raised by :func:`_looked_up` to answer a lookup without an entry (503 or 404)."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


async def _answer(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, _Answer)
    return exc.response


async def _answered(request: Request, counted: str) -> MockState:
    """The faults of one integrator call other than a send: 503 when down, 401 when our
    credentials are refused, the drawn latency, a drawn transient 503 (raised as _Answer); else
    the state. The call is counted as ``counted`` when it arrives."""
    state = _state(request)
    if state.faults.down:
        state.stats["down"] += 1
        raise _Answer(_unavailable())
    if state.faults.unauthorized:
        state.stats["unauthorized"] += 1
        raise _Answer(_unauthorized())
    draws = state.draw()
    state.stats[counted] += 1  # counted when it arrives: a call in flight is visible
    if draws.latency_s:
        await asyncio.sleep(draws.latency_s)
    if draws.transient:
        state.stats["transient"] += 1
        raise _Answer(_transient())
    return state


async def _looked_up(request: Request, find: Callable[[MockState], LedgerEntry | None]
                     ) -> LedgerEntry:
    """A lookup's ledger entry; raises _Answer with the answer instead (503 down or transient,
    404 not there)."""
    state = await _answered(request, "lookups")
    entry = find(state)
    if entry is None:
        state.stats["lookups_missing"] += 1
        raise _Answer(JSONResponse({"error": "not found"}, status_code=404))
    state.stats["lookups_found"] += 1
    return entry


@invoices.get("/invoices/{tenant}/by-uuid/{uuid}")
async def lookup_uuid(request: Request, tenant: str, uuid: str) -> JSONResponse:
    """The document accepted with this UUID, under whichever number."""
    entry = await _looked_up(request, lambda state: state.uuid_holder(tenant, uuid))
    return JSONResponse({"number": entry.number, "invoice_id": entry.invoice_id,
                         "uuid": entry.uuid, "ref": entry.ref})


@invoices.get("/invoices/{tenant}/by-uuid/{uuid}/status")
async def gib_status(request: Request, tenant: str, uuid: str) -> JSONResponse:
    """GİB's verdict on the document accepted with this UUID (404: no such document)."""
    state = await _answered(request, "gib_status_checks")
    if state.uuid_holder(tenant, uuid) is None:
        return JSONResponse({"error": "not found"}, status_code=404)
    verdict = state.gib_verdicts.get(uuid.lower(), state.gib_default)
    return JSONResponse(verdict.as_json())


@invoices.get("/invoices/{tenant}/{number}/document")
async def document(request: Request, tenant: str, number: str) -> Response:
    """The document exactly as accepted: XML for UBL-TR, JSON otherwise."""
    entry = await _looked_up(request, lambda state: state.holder(tenant, number))
    if isinstance(entry.document, str):
        return Response(entry.document.encode(), media_type="application/xml")
    return JSONResponse(entry.document)


@invoices.get("/invoices/{tenant}/{number}")
async def lookup(request: Request, tenant: str, number: str) -> JSONResponse:
    """Whether ``number`` is accepted, and for which invoice."""
    entry = await _looked_up(request, lambda state: state.holder(tenant, number))
    return JSONResponse({"number": entry.number, "invoice_id": entry.invoice_id,
                         "ref": entry.ref})


@invoices.get("/recipients/{tax_id}")
async def recipient(request: Request, tax_id: str) -> JSONResponse:
    """The recipient check: is ``tax_id`` a registered e-Fatura user, with which aliases."""
    state = await _answered(request, "recipient_checks")
    aliases = state.recipients.get(tax_id)
    return JSONResponse({"tax_id": tax_id, "registered": aliases is not None,
                         "aliases": list(aliases or ())})


@invoices.get("/ledger")
async def ledger(request: Request) -> JSONResponse:
    state = _state(request)
    if state.faults.down:
        state.stats["down"] += 1
        return _unavailable()
    return JSONResponse([entry.as_json() for entry in state.ledger.values()])


@admin.get("/faults")
async def get_faults(request: Request) -> JSONResponse:
    return JSONResponse(_state(request).faults.model_dump(mode="json"))


@admin.put("/faults")
async def put_faults(request: Request, patch: FaultsPatch) -> JSONResponse:
    state = _state(request)
    changes = patch.model_dump(exclude_unset=True)
    try:
        # Validate the whole result before anything changes: a bad patch changes nothing.
        updated = Faults.model_validate({**state.faults.model_dump(), **changes})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return JSONResponse({"detail": f"{where}: {first['msg']}"}, status_code=422)
    state.faults = updated
    log.info("mock_faults_changed", changed=sorted(changes))
    return JSONResponse(state.faults.model_dump(mode="json"))


@admin.put("/recipients")
async def put_recipients(request: Request, registered: dict[str, list[str]]) -> JSONResponse:
    """Register e-Fatura users with their aliases (added to those registered); an empty list
    unregisters the tax id. Answers the number of registered users."""
    state = _state(request)
    for tax_id, aliases in registered.items():
        if aliases:
            state.recipients[tax_id] = tuple(dict.fromkeys(aliases))
            state.unregistered.discard(tax_id)
        else:
            state.recipients.pop(tax_id, None)
            state.unregistered.add(tax_id)
    log.info("mock_recipients_changed", changed=len(registered))
    return JSONResponse({"registered": len(state.recipients)})


@admin.put("/gib-status")
async def put_gib_status(request: Request, verdicts: dict[str, GibVerdict]) -> JSONResponse:
    """Set GİB's verdict per document UUID (``"*"``: the default of every other document).
    Answers the default and the number of documents with a verdict of their own."""
    state = _state(request)
    bad = [key for key in verdicts if key != GIB_DEFAULT_KEY and not _UUID.match(key)]
    if bad:
        return JSONResponse({"detail": f"not a UUID (nor {GIB_DEFAULT_KEY!r}): {bad[0][:64]!r}"},
                            status_code=422)
    for key, verdict in verdicts.items():
        if key == GIB_DEFAULT_KEY:
            state.gib_default = verdict
        else:
            state.gib_verdicts[key.lower()] = verdict
    log.info("mock_gib_status_changed", changed=len(verdicts))
    return JSONResponse({"default": state.gib_default.as_json(),
                         "documents": len(state.gib_verdicts)})


@admin.get("/stats")
async def stats(request: Request) -> JSONResponse:
    return JSONResponse(_state(request).stats_json())


@admin.post("/reset")
async def reset(request: Request) -> JSONResponse:
    state = _state(request)
    state.reset()
    return JSONResponse(state.stats_json())


def create_app(faults: Faults | None = None, seed: int | None = None) -> FastAPI:
    """A mock integrator application with its own ledger (``app.state.mock``)."""
    app = FastAPI(title="gapless mock integrator", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.mock = MockState(faults, seed)
    app.add_exception_handler(_Answer, _answer)
    app.include_router(invoices)
    app.include_router(admin)
    return app


def _invalid(exc: ValidationError) -> JSONResponse:
    """422 for a malformed request, naming the fields but never echoing their values."""
    detail = [{"loc": ["body", *first["loc"]], "msg": first["msg"], "type": first["type"]}
              for first in exc.errors(include_url=False, include_input=False)]
    return JSONResponse({"detail": detail}, status_code=422)


def _duplicate(holder: LedgerEntry, reason: str) -> JSONResponse:
    return JSONResponse({"reason": reason, "tenant": holder.tenant, "number": holder.number,
                         "invoice_id": holder.invoice_id, "uuid": holder.uuid,
                         "ref": holder.ref}, status_code=409)


def abortable_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, extended so a request can drop its connection without answering.

    An ASGI app cannot close its connection: raising before the response makes uvicorn answer
    500. This subclass puts ``scope["extensions"]["gapless.abort"]`` (the transport's ``abort``)
    into every request's scope; it is the "dropped connection" kind of lost response.
    """
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class AbortableHTTPProtocol(base):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._gapless_abort = transport.abort

        def handle_events(self) -> None:  # h11
            super().handle_events()
            self._tag_scope()

        def on_headers_complete(self) -> None:  # httptools
            self._tag_scope()
            super().on_headers_complete()

        def _tag_scope(self) -> None:
            scope = getattr(self, "scope", None)
            if isinstance(scope, dict):
                scope.setdefault("extensions", {})["gapless.abort"] = self._gapless_abort

    return AbortableHTTPProtocol


def run_mock_integrator(host: str, port: int, faults: Faults, seed: int | None) -> None:
    """Serve the mock integrator until SIGINT/SIGTERM (one process, one event loop)."""
    import uvicorn

    app = create_app(faults, seed)
    log.info("mock_integrator_started", host=host, port=port, seed=seed,
             faults=faults.model_dump(mode="json"))
    config = uvicorn.Config(app, host=host, port=port, access_log=False, log_config=None,
                            log_level="warning", http=abortable_protocol(), lifespan="off",
                            timeout_keep_alive=30, backlog=2048,
                            # A withheld ("timeout") answer must not hold up SIGTERM for a minute.
                            timeout_graceful_shutdown=2)
    # uvicorn re-raises the stop signal once it has shut down gracefully; with a no-op handler in
    # place the process then ends normally (exit 0) instead of dying by the signal.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda *_: None)
    uvicorn.Server(config).run()
    log.info("mock_integrator_stopped", ledger_size=len(app.state.mock.ledger))
