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

The ledger is keyed by (tenant, number) and kept in acceptance order for the life of the process.
Concurrency: one asyncio event loop in one process; the check-and-insert of a number runs without
an ``await`` in between, so it is atomic with respect to every other request.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.requests import ClientDisconnect

from gapless.logging import get_logger

log = get_logger("gapless.mock_integrator")

#: Customers with this tax id are always rejected (422), whatever the fault settings.
REJECTED_TAX_ID = "0000000000"
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

    @model_validator(mode="after")
    def _no_nulls(self) -> FaultsPatch:
        given = self.model_dump(exclude_unset=True)
        if any(value is None for value in given.values()):
            raise ValueError("fault fields cannot be null")
        return self


class Submission(BaseModel):
    """``POST /invoices``."""

    tenant: str = Field(min_length=1)
    number: str = Field(min_length=1)
    invoice_id: str = Field(min_length=1)
    document: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class LedgerEntry:
    tenant: str
    number: str
    invoice_id: str
    ref: str
    accepted_at: str

    def as_json(self) -> dict[str, str]:
        return {"tenant": self.tenant, "number": self.number, "invoice_id": self.invoice_id,
                "ref": self.ref, "accepted_at": self.accepted_at}


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

    def accept(self, submission: Submission) -> LedgerEntry:
        """Record ``submission`` under a new ref. The caller has just seen the number free.

        Synchronous on purpose: the caller checks ``holder`` and calls this without an ``await``
        in between, so no other request can take the number in the meantime.
        """
        key = (submission.tenant, submission.number)
        if key in self.ledger:
            raise RuntimeError("accept() called for a number already in the ledger")
        self._refs += 1
        entry = LedgerEntry(submission.tenant, submission.number, submission.invoice_id,
                            f"MI-{self._refs:08d}", datetime.now(UTC).isoformat())
        self.ledger[key] = entry
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
STAT_NAMES = ("posts", "accepted", "duplicate", "rejected", "rejected_tax_id", "transient",
              "lost_response", "down", "lookups", "lookups_found", "lookups_missing")


def _tax_id(document: dict[str, Any]) -> object:
    customer = document.get("customer")
    return customer.get("tax_id") if isinstance(customer, dict) else None


def _unavailable() -> JSONResponse:
    return JSONResponse({"error": "integrator unavailable"}, status_code=503)


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


def create_app(faults: Faults | None = None, seed: int | None = None) -> FastAPI:
    """A mock integrator application with its own ledger (``app.state.mock``)."""
    state = MockState(faults, seed)
    app = FastAPI(title="gapless mock integrator", docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.mock = state

    @app.post("/invoices")
    async def submit(request: Request) -> JSONResponse:
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
        draws = state.draw()
        if draws.latency_s:
            await asyncio.sleep(draws.latency_s)
        if draws.transient:
            state.stats["transient"] += 1
            return JSONResponse({"error": "temporarily unavailable"}, status_code=503)
        # A number already accepted answers 409 before any business check, so a resend of an
        # accepted document is always recognisable as "mine".
        # From here to state.accept() there is no await: check-and-insert is atomic.
        holder = state.holder(submission.tenant, submission.number)
        if holder is not None:
            state.stats["duplicate"] += 1
            return _duplicate(holder)
        if _tax_id(submission.document) == REJECTED_TAX_ID:
            state.stats["rejected"] += 1
            state.stats["rejected_tax_id"] += 1
            return JSONResponse({"reason": "invalid tax id"}, status_code=422)
        if draws.reject:
            state.stats["rejected"] += 1
            return JSONResponse({"reason": state.reject_reason()}, status_code=422)
        accepted = state.accept(submission)
        state.stats["accepted"] += 1
        if draws.lost:
            state.stats["lost_response"] += 1
            return await _lose_response(request, state)
        return JSONResponse({"ref": accepted.ref}, status_code=201)

    @app.get("/invoices/{tenant}/{number}")
    async def lookup(tenant: str, number: str) -> JSONResponse:
        if state.faults.down:
            state.stats["down"] += 1
            return _unavailable()
        draws = state.draw()
        if draws.latency_s:
            await asyncio.sleep(draws.latency_s)
        state.stats["lookups"] += 1
        if draws.transient:
            state.stats["transient"] += 1
            return JSONResponse({"error": "temporarily unavailable"}, status_code=503)
        entry = state.holder(tenant, number)
        if entry is None:
            state.stats["lookups_missing"] += 1
            return JSONResponse({"error": "not found"}, status_code=404)
        state.stats["lookups_found"] += 1
        return JSONResponse({"number": entry.number, "invoice_id": entry.invoice_id,
                             "ref": entry.ref})

    @app.get("/ledger")
    async def ledger() -> JSONResponse:
        if state.faults.down:
            state.stats["down"] += 1
            return _unavailable()
        return JSONResponse([entry.as_json() for entry in state.ledger.values()])

    @app.get("/admin/faults")
    async def get_faults() -> JSONResponse:
        return JSONResponse(state.faults.model_dump(mode="json"))

    @app.put("/admin/faults")
    async def put_faults(patch: FaultsPatch) -> JSONResponse:
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

    @app.get("/admin/stats")
    async def stats() -> JSONResponse:
        return JSONResponse(state.stats_json())

    @app.post("/admin/reset")
    async def reset() -> JSONResponse:
        state.reset()
        return JSONResponse(state.stats_json())

    return app


def _invalid(exc: ValidationError) -> JSONResponse:
    """422 for a malformed request, naming the fields but never echoing their values."""
    detail = [{"loc": ["body", *first["loc"]], "msg": first["msg"], "type": first["type"]}
              for first in exc.errors(include_url=False, include_input=False)]
    return JSONResponse({"detail": detail}, status_code=422)


def _duplicate(holder: LedgerEntry) -> JSONResponse:
    return JSONResponse({"reason": "number already accepted", "tenant": holder.tenant,
                         "number": holder.number, "invoice_id": holder.invoice_id,
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
