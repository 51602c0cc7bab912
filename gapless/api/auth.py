"""API authentication: bearer tokens from ``GAPLESS_API_TOKEN``, scoped to a tenant or not.

A tenant-scoped token sees only its tenant: another tenant's invoice is a 404 exactly like a
missing one (also when both hold an invoice of the id: invoice_id is unique per tenant, and the
token reads its own), another tenant's feed a 403. Tokens are compared in constant time and
never logged.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gapless.errors import ConfigurationError
from gapless.logging import get_logger
from gapless.numbers import TENANT_RE
from gapless.settings import Settings

log = get_logger("gapless.api")

#: A token shorter than this is refused at start-up: it would be guessable.
MIN_TOKEN_LENGTH = 16
ALL_TENANTS = "*"

bearer = HTTPBearer(auto_error=False, scheme_name="token",
                    description="A token of GAPLESS_API_TOKEN")


@dataclass(frozen=True)
class ApiToken:
    """One accepted bearer token. ``tenant`` None: every tenant."""

    secret: bytes
    tenant: str | None
    #: Position in GAPLESS_API_TOKEN (1-based): how logs refer to a token, never by its value.
    index: int


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's tenant scope (None: every tenant)."""

    tenant: str | None
    token_index: int | None

    def may_see(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant


def parse_tokens(spec: str) -> tuple[ApiToken, ...]:
    """Parse ``GAPLESS_API_TOKEN``: a comma-separated list of ``token`` or ``tenant:token``.

    ``token`` (or ``*:token``) may act for every tenant; ``tenant:token`` only for that tenant.
    The first ``:`` separates the tenant, so an all-tenant token containing ``:`` must be
    written ``*:token``. Tokens are at least 16 printable ASCII characters without spaces or
    commas; blank entries are ignored. Raises ConfigurationError naming the entry by position,
    never by its value.
    """
    tokens: list[ApiToken] = []
    seen: set[bytes] = set()
    for index, raw in enumerate(spec.split(","), start=1):
        entry = raw.strip()
        if not entry:
            continue
        tenant: str | None = None
        secret = entry
        if ":" in entry:
            tenant, secret = entry.split(":", 1)
            if tenant == ALL_TENANTS:
                tenant = None
            elif not TENANT_RE.match(tenant):
                raise ConfigurationError(
                    f"GAPLESS_API_TOKEN entry {index}: the part before ':' must be a tenant "
                    "name or '*'")
        if (len(secret) < MIN_TOKEN_LENGTH or not secret.isascii() or not secret.isprintable()
                or any(char.isspace() for char in secret)):
            raise ConfigurationError(
                f"GAPLESS_API_TOKEN entry {index}: a token must be at least {MIN_TOKEN_LENGTH} "
                "printable ASCII characters without spaces")
        encoded = secret.encode()
        if encoded in seen:
            raise ConfigurationError(f"GAPLESS_API_TOKEN entry {index}: the same token is "
                                     "listed twice")
        seen.add(encoded)
        tokens.append(ApiToken(encoded, tenant, index))
    return tuple(tokens)


class Authenticator:
    """Checks bearer tokens in constant time against every configured token."""

    def __init__(self, tokens: tuple[ApiToken, ...], *, insecure_no_auth: bool) -> None:
        if tokens and insecure_no_auth:
            raise ConfigurationError("GAPLESS_API_TOKEN is set and --insecure-no-auth was given; "
                                     "choose one")
        if not tokens and not insecure_no_auth:
            raise ConfigurationError(
                "GAPLESS_API_TOKEN is empty: set it (comma-separated 'token' or 'tenant:token' "
                "entries) or start with --insecure-no-auth on a trusted network only")
        self.tokens = tokens
        self.insecure_no_auth = insecure_no_auth

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(parse_tokens(settings.api_token),
                   insecure_no_auth=settings.api_insecure_no_auth)

    def authenticate(self, presented: str | None) -> Principal:
        """The caller for a presented token; 401 (with WWW-Authenticate) when it is not valid."""
        if self.insecure_no_auth:
            return Principal(None, None)
        if not presented:
            raise _unauthorized("missing bearer token", error=None)
        candidate = presented.encode()
        match: ApiToken | None = None
        for token in self.tokens:  # no early exit: the time taken says nothing about which
            if hmac.compare_digest(candidate, token.secret):
                match = token
        if match is None:
            raise _unauthorized("invalid bearer token", error="invalid_token")
        return Principal(match.tenant, match.index)


def _unauthorized(detail: str, *, error: str | None) -> HTTPException:
    challenge = 'Bearer realm="gapless"'
    if error:
        challenge += f', error="{error}"'
    return HTTPException(401, detail, headers={"WWW-Authenticate": challenge})


async def principal(request: Request,
                    credentials: HTTPAuthorizationCredentials | None = Security(bearer)
                    ) -> Principal:
    """The caller of a request (a FastAPI dependency); 401 when its token is not valid."""
    auth: Authenticator = request.app.state.auth
    presented = credentials.credentials if credentials is not None else None
    try:
        return auth.authenticate(presented)
    except HTTPException:
        log.warning("api_auth_failed", reason="missing" if not presented else "invalid")
        raise
