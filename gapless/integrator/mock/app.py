"""The mock integrator's HTTP API (docs/mock.md):
FastAPI routes over one :class:`~gapless.integrator.mock.state.MockState` (``app.state.mock``).

Every non-admin call first meets the faults in force (down, refused credentials, latency, a
transient 503); a send then meets the business checks and, accepted, may lose its answer. A
number's check and its insert run without an ``await`` in between, so two sends of one number
never both get 201. The faults and refusals, one by one: docs/mock.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from gapless.integrator.http import WRONG_CHANNEL
from gapless.integrator.mock.state import (
    GIB_DEFAULT_KEY,
    MAX_BODY_BYTES,
    REJECTED_TAX_ID,
    UUID_RE,
    AnswerGiven,
    Draws,
    Examined,
    Faults,
    FaultsPatch,
    GibVerdict,
    HostileAnswer,
    LedgerEntry,
    MockState,
    RecipientAliases,
    Submission,
    channel_problem,
    examine,
)
from gapless.logging import get_logger

log = get_logger("gapless.integrator.mock")

#: The scope extension through which a request drops its own connection (a lost response of
#: the "drop" kind); :func:`gapless.integrator.mock.server.abortable_protocol` provides it.
ABORT_EXTENSION = "gapless.abort"


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
        abort = request.scope.get("extensions", {}).get(ABORT_EXTENSION)
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
        body = await _bounded_body(request)
    except ClientDisconnect:
        # The client went away mid-request (a killed worker): nothing arrived, nothing to do.
        return JSONResponse({"error": "client disconnected"}, status_code=400)
    if body is None:
        return JSONResponse({"error": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
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
    examined = _checked(state, submission, draws)  # from here to accept(): no await
    if isinstance(examined, JSONResponse):
        return examined
    accepted = state.accept(submission, examined.kind, examined.profile)
    state.stats["accepted"] += 1
    if examined.kind == "despatch":
        state.stats["accepted_despatch"] += 1
    if draws.lost:
        state.stats["lost_response"] += 1
        return await _lose_response(request, state)
    return JSONResponse({"ref": accepted.ref}, status_code=201)


async def _bounded_body(request: Request) -> bytes | None:
    """The request's body, or None when it is longer than ``MAX_BODY_BYTES`` (read no
    further)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _checked(state: MockState, submission: Submission, draws: Draws) -> JSONResponse | Examined:
    """Why the submission is not accepted (409, 422), or what the mock read of its document
    (it is accepted). Synchronous: the check and the insert that follows it are atomic with
    respect to every other request.

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
    return examined


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
    """GİB's verdict on the document accepted with this UUID, and its receiver's answer (null
    until answered); 404: no such document."""
    state = await _answered(request, "gib_status_checks")
    if state.uuid_holder(tenant, uuid) is None:
        return JSONResponse({"error": "not found"}, status_code=404)
    answer = state.answer(uuid)
    return JSONResponse({**state.verdict(uuid).as_json(),
                         "answer": None if answer is None else answer.as_json()})


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
    """The recipient check: is ``tax_id`` a registered e-Fatura user, an e-İrsaliye user, with
    which aliases of each."""
    state = await _answered(request, "recipient_checks")
    aliases = state.recipients.get(tax_id)
    despatch = state.despatch_recipients.get(tax_id)
    return JSONResponse({"tax_id": tax_id, "registered": aliases is not None,
                         "aliases": list(aliases or ()),
                         "despatch_registered": despatch is not None,
                         "despatch_aliases": list(despatch or ())})


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
async def put_recipients(request: Request,
                         registered: dict[str, list[str] | RecipientAliases]) -> JSONResponse:
    """Register recipients: a list is a tax id's e-Fatura aliases, an object its ``invoice`` and
    ``despatch`` aliases; an empty list unregisters (that kind). Answers the number of
    registered e-Fatura users (``registered``) and e-İrsaliye users (``despatch_registered``)."""
    state = _state(request)
    state.register(registered)
    log.info("mock_recipients_changed", changed=len(registered))
    return JSONResponse({"registered": len(state.recipients),
                         "despatch_registered": len(state.despatch_recipients)})


@admin.put("/gib-status")
async def put_gib_status(request: Request, verdicts: dict[str, GibVerdict]) -> JSONResponse:
    """Set GİB's verdict per document UUID (``"*"``: the default of every other document).
    Answers the default and the number of documents with a verdict of their own."""
    state = _state(request)
    bad = [key for key in verdicts if key != GIB_DEFAULT_KEY and not UUID_RE.match(key)]
    if bad:
        return JSONResponse({"detail": f"not a UUID (nor {GIB_DEFAULT_KEY!r}): {bad[0][:64]!r}"},
                            status_code=422)
    state.set_verdicts(verdicts)
    log.info("mock_gib_status_changed", changed=len(verdicts))
    return JSONResponse({"default": state.gib_default.as_json(),
                         "documents": len(state.gib_verdicts)})


@admin.put("/answers")
async def put_answers(request: Request, answers: dict[str, AnswerGiven]) -> JSONResponse:
    """The receivers answer accepted documents, by UUID: a dispatch note (KABUL, RED or
    KISMIKABUL, line by line), or a TICARIFATURA invoice (KABUL or RED, no lines). Every answer
    is checked before any is recorded (a bad request changes nothing): 404 a UUID no accepted
    document has, 422 an answer the document cannot take, 409 a document already answered
    otherwise. Answers the number of documents answered."""
    state = _state(request)
    for key, given in answers.items():
        if not UUID_RE.match(key):
            return JSONResponse({"detail": f"not a UUID: {key[:64]!r}"}, status_code=422)
        problem = state.answer_problem(key, given)
        if problem is not None:
            status, reason = problem
            return JSONResponse({"detail": f"{key}: {reason}"}, status_code=status)
    state.set_answers(answers)
    state.stats["answers"] = len(state.answers)
    log.info("mock_answers_changed", changed=len(answers))
    return JSONResponse({"answered": len(state.answers)})


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
    app.add_middleware(_HostileAnswers)
    return app


#: The bodies of the ``hostile_answer`` fault.
HOSTILE_BODIES: dict[HostileAnswer, bytes] = {
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "huge": b'{"ref":"' + b"x" * (2 * 1024 * 1024) + b'"}',
    "garbage": b"<html>\x00\xff not JSON",
}
_UNTOUCHED = ("/admin", "/ledger")

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class _HostileAnswers:
    """ASGI middleware of the ``hostile_answer`` fault: the answer's status and headers kept
    (but its length and type), its body replaced. A pass-through while the fault is off."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Any]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state: MockState | None = scope["app"].state.mock if "app" in scope else None
        mode = "none" if state is None else state.faults.hostile_answer
        if (mode == "none" or scope["type"] != "http"
                or scope["path"].startswith(_UNTOUCHED)):
            await self.app(scope, receive, send)
            return
        assert state is not None
        body = HOSTILE_BODIES[mode]

        async def hostile(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [(name, value) for name, value in message.get("headers", [])
                           if name.lower() not in (b"content-length", b"content-type")]
                headers += [(b"content-length", str(len(body)).encode()),
                            (b"content-type", b"application/json")]
                await send({**message, "headers": headers})
            elif message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    state.stats["hostile_answers"] += 1
                    await send({"type": "http.response.body", "body": body})
            else:
                await send(message)

        await self.app(scope, receive, hostile)


def _invalid(exc: ValidationError) -> JSONResponse:
    """422 for a malformed request, naming the fields but never echoing their values."""
    detail = [{"loc": ["body", *first["loc"]], "msg": first["msg"], "type": first["type"]}
              for first in exc.errors(include_url=False, include_input=False)]
    return JSONResponse({"detail": detail}, status_code=422)


def _duplicate(holder: LedgerEntry, reason: str) -> JSONResponse:
    return JSONResponse({"reason": reason, "tenant": holder.tenant, "number": holder.number,
                         "invoice_id": holder.invoice_id, "uuid": holder.uuid,
                         "ref": holder.ref}, status_code=409)
