"""The HTTP API: issue an invoice, read its status, follow the commit-ordered event feed.

``create_app(settings)`` builds the FastAPI application (:mod:`gapless.api.app`); its lifespan
opens the database engine (actor ``api``: events it causes say so) and a confirmed
:class:`~gapless.amqp.publisher.Publisher`. One router per resource: :mod:`gapless.api.invoices`,
:mod:`gapless.api.events`, :mod:`gapless.api.health`; authentication in :mod:`gapless.api.auth`.

Endpoints (OpenAPI at ``/docs``):

* ``POST /v1/invoices`` — the body is checked by :func:`gapless.message.parse_message`, the very
  parser the worker uses, then published at **user** priority (AMQP 4) with publisher confirms;
  202 with the status URL. Idempotent per ``invoice_id``: the worker maps a repeated id onto the
  same invoice, and an invoice the database already knows is not published again unless it is
  still RECEIVED.
* ``GET /v1/invoices/{invoice_id}`` — status, number, UUID, attempts, last error, events.
* ``GET /v1/events?cursor=N&limit=L[&tenant=T]`` — the feed (:mod:`gapless.ledger.feed`): follow
  ``next`` while it is not null, then poll ``poll_more``; nothing is missed or repeated (I6).
* ``GET /healthz``, ``GET /metrics`` — unauthenticated.

Authentication: ``Authorization: Bearer <token>``; the tokens come from ``GAPLESS_API_TOKEN`` (see
:func:`parse_tokens`). A tenant-scoped token sees only its tenant: another tenant's invoice is a
404 exactly like a missing one, another tenant's feed a 403. Tokens are never logged.
"""

from gapless.api.app import create_app
from gapless.api.auth import ApiToken, Authenticator, Principal, parse_tokens

__all__ = ["ApiToken", "Authenticator", "Principal", "create_app", "parse_tokens"]
