"""The HTTP client the integrator adapters share: one pooled aiohttp session to one base URL.

Guarantee: :meth:`IntegratorSession.request` returns ``(status, body)`` for every answer the
integrator gives, whatever its status (each adapter classifies statuses and bodies itself); a
request that gets no answer — connection refused or dropped, no connection or no data within
``settings.integrator_timeout_s`` — raises :class:`TransientIntegratorError`: the outcome is
unknown, the request may have arrived. That error's message names only what was asked and the
failure's class, never the URL (a path can carry a tax id).

Answers are bounded: a body is read up to :data:`MAX_ANSWER_BYTES` — a longer one is a
TransientIntegratorError like no answer at all (the request may have arrived) — and
:func:`json_or_none` reads it with bounded nesting (:data:`MAX_ANSWER_DEPTH`), so an answer
nested too deep, or not JSON, is ``None`` for the adapter to classify, never an exception.

Pool: ``settings.integrator_max_connections`` keep-alive connections (waiting for one counts
towards the connect timeout), opened on first use inside the running event loop; one session is
safe to share between the tasks of that loop. aiohttp rather than httpx: about a fifth of the
CPU per call (docs/benchmarks.md, "Mock integrator").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp

from gapless.integrator.base import TransientIntegratorError
from gapless.message import jsontext

if TYPE_CHECKING:
    from gapless.settings import Settings

USER_AGENT = "gapless"
#: Seconds an idle keep-alive connection stays in the pool.
KEEPALIVE_S = 30.0
#: The largest answer body read (every answer of an integrator API is a small JSON object).
MAX_ANSWER_BYTES = 1024 * 1024
#: How deep an answer's JSON may nest (the adapters read at most three levels).
MAX_ANSWER_DEPTH = 32
_CHUNK = 64 * 1024


class IntegratorSession:
    """A lazily opened aiohttp session to ``base_url`` with the settings' pool and timeouts.

    ``label`` prefixes every error message (``"Nilvera "``). With ``hide_cause`` the aiohttp
    error is not chained to the TransientIntegratorError (``raise … from None``): for an adapter
    whose URLs carry data that must not reach a log through a traceback. Without it the cause is
    chained, so ``gapless doctor`` can say why the integrator is unreachable.
    """

    def __init__(self, base_url: str, settings: Settings, *,
                 headers: Mapping[str, str] | None = None, label: str = "",
                 hide_cause: bool = False) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"user-agent": USER_AGENT, **(headers or {})}
        self._limit = settings.integrator_max_connections
        timeout_s = settings.integrator_timeout_s
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout_s,
                                              sock_connect=timeout_s, sock_read=timeout_s)
        self._label = label
        self._hide_cause = hide_cause
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never the headers: they may hold a key
        return f"IntegratorSession({self._base!r})"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0,
                                               keepalive_timeout=KEEPALIVE_S),
                timeout=self._timeout, headers=self._headers, raise_for_status=False)
        return self._session

    async def request(self, method: str, path: str, what: str, *,
                      params: Mapping[str, str] | None = None, data: Any = None,
                      payload: Any = None, headers: Mapping[str, str] | None = None
                      ) -> tuple[int, bytes]:
        """One exchange (``data``: bytes or a form; ``payload``: a JSON body): ``(status, body)``
        of any answer. Raises TransientIntegratorError ``"<label><what>: <failure class>
        (outcome unknown)"`` when no answer came, or one larger than MAX_ANSWER_BYTES."""
        try:
            async with self._client().request(method, self._base + path, params=params,
                                              data=data, json=payload,
                                              headers=headers) as response:
                return response.status, await self._bounded(response, what)
        except (TimeoutError, aiohttp.ClientError) as exc:
            error = TransientIntegratorError(
                f"{self._label}{what}: {type(exc).__name__} (outcome unknown)")
            if self._hide_cause:
                raise error from None
            raise error from exc

    async def _bounded(self, response: aiohttp.ClientResponse, what: str) -> bytes:
        """The answer's body, read up to MAX_ANSWER_BYTES; a longer one closes the connection
        and is a TransientIntegratorError."""
        declared = response.content_length
        if declared is None or declared <= MAX_ANSWER_BYTES:
            body = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    break
            else:
                return bytes(body)
        response.close()  # the rest is never read: the connection is not reused
        raise TransientIntegratorError(
            f"{self._label}{what}: an answer larger than {MAX_ANSWER_BYTES} bytes "
            "(outcome unknown)")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def json_or_none(body: bytes) -> Any:
    """The JSON value of an answer's body, or None when it is not JSON (or nests deeper than
    MAX_ANSWER_DEPTH). Numbers with a fraction are ``Decimal``s."""
    try:
        return jsontext.loads(body, max_depth=MAX_ANSWER_DEPTH)
    except ValueError:  # NotJson, and an integer literal past the interpreter's limit
        return None
