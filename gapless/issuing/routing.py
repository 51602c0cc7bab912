"""Routing before the seal: the channel (e-Fatura or e-Arşiv), profile, alias and series a
message's document takes, chosen the way a Turkish issuer chooses them — by asking the
integrator whether the customer is a registered e-Fatura user.

Routing applies to a tenant with an issuer profile whose message names a series of channel
``efatura`` or ``earsiv``, or names no series while the tenant has a default series of those
channels. A series of channel ``any`` is today's behaviour: the producer's profile, no check.

* A registered customer gets an e-Fatura (``TEMELFATURA``, or the message's ``TICARIFATURA`` /
  ``KAMU`` / ``IHRACAT``) in a series of channel ``efatura``, sent to the customer's alias (the
  message's ``customer.alias`` if it is one of theirs, else their first);
* anyone else gets ``EARSIVFATURA`` in a series of channel ``earsiv``.

A dispatch note (:class:`~gapless.message.DespatchMessage`) is routed the same way by the
e-İrsaliye half of the answer: in a series of channel ``edespatch`` (the message's, or the
tenant's default), to the customer's e-İrsaliye alias (the message's ``customer.alias`` if it is
one of theirs, else their first) or, when the customer is not an e-İrsaliye user, to GİB's box
``urn:mail:irsaliyepk@gib.gov.tr``. An invoice never takes an ``edespatch`` series, a dispatch
note never another.

A message whose ``profile``, ``series`` or ``customer.alias`` contradicts the answer is refused
(:class:`RoutingRefused`, dead-lettered before any number). When the integrator cannot answer,
:class:`RecipientUnavailable` makes the message wait (requeued): nothing is sealed on a guess.

The choice is written into the message itself (``series``, ``profile``, ``customer.alias``)
before its draft is stored, so it is pinned with the number: every resend renders and sends the
same. Answers are cached in PostgreSQL (``recipients``, per integrator account) for
``GAPLESS_RECIPIENT_TTL_S``, shared by every worker, and never read or written inside the
transaction that seals a number. A worker also keeps the answers it read in memory
(:class:`RecipientMemory`), for no longer than their TTL and only while it listens to the table's
change notices: an answer changed by any process or client is dropped at once, and while the
worker cannot listen every answer is read from the table again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gapless.constants import EARSIV_PROFILE, Channel
from gapless.errors import GaplessError, UnknownSeriesError
from gapless.integrator.base import IntegratorError, Recipient
from gapless.ledger.catalog import Catalog
from gapless.ledger.database import Database
from gapless.ledger.queries import routing as q
from gapless.message import GIB_DESPATCH_BOX, AnyMessage, DespatchMessage, InvoiceMessage
from gapless.numbers import SeriesSpec

#: Profiles of an e-Fatura document the message may ask for (the first is the default).
EFATURA_PROFILES = ("TEMELFATURA", "TICARIFATURA", "KAMU", "IHRACAT")
ROUTED = frozenset({Channel.EFATURA, Channel.EARSIV})
#: Series whose documents are routed by the recipient check: the invoices' routed channels, and
#: dispatch notes.
ASKS_RECIPIENT = ROUTED | {Channel.EDESPATCH}


class RoutingRefused(GaplessError):
    """The message contradicts the routing (or the tenant lacks the series it needs):
    dead-lettered with :attr:`reason`, before any number."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RecipientUnavailable(GaplessError):
    """The integrator could not answer the recipient check: the message waits."""


class RecipientSource(Protocol):
    """Who answers the recipient check (the guarded integrator: the tenant's account)."""

    async def recipient(self, tenant: str, tax_id: str) -> Recipient: ...

    def registry_of(self, tenant: str) -> str:
        """Whose answers ``tenant``'s recipient checks are: its integrator account's name, ''
        for the global account. Answers are cached per account (a test account and a live one
        see different registries)."""
        ...


@dataclass(frozen=True)
class Route:
    """Where a message's document goes: its series, channel (``any``: not routed) and the
    message with the choice written in."""

    message: AnyMessage
    series: SeriesSpec
    channel: Channel


#: Answers one process keeps in memory at most (the oldest kept goes first).
MEMORY_ENTRIES = 100_000
#: The notification channel the table ``recipients`` announces its changes on
#: (schema/current/routing.sql; payload ``account<TAB>tax_id``, or ``*`` for every answer).
NOTICE_CHANNEL = "gapless_recipients"


class RecipientMemory:
    """The recipient answers one process has read, kept until their TTL ends or the table says
    they changed (:class:`gapless.ledger.notices.Notices` on :data:`NOTICE_CHANNEL`).

    It starts deaf: nothing is kept or answered until :meth:`listening` (the LISTEN is in
    place); :meth:`deaf` (the connection lost) forgets everything. An answer read from the table
    is kept only if nothing was heard since its read began (:attr:`generation` unchanged): a
    change committed while the read was on its way may not be in what it read.
    """

    def __init__(self, max_entries: int = MEMORY_ENTRIES) -> None:
        self._answers: dict[tuple[str, str], tuple[float, Recipient]] = {}
        self._max_entries = max_entries
        self._on = False
        #: Moves on with everything heard (a change, deafness, listening again).
        self.generation = 0

    def get(self, account: str, tax_id: str) -> Recipient | None:
        """The kept answer, if any and not past its TTL."""
        kept = self._answers.get((account, tax_id))
        if kept is None:
            return None
        if kept[0] <= time.monotonic():
            self._answers.pop((account, tax_id), None)
            return None
        return kept[1]

    def keep(self, account: str, recipient: Recipient, *, until: float,
             generation: int) -> None:
        """Keep an answer read from the table until ``until`` (monotonic clock) — if the memory
        listens and heard nothing since ``generation`` was taken, before the read."""
        if not self._on or generation != self.generation:
            return
        if len(self._answers) >= self._max_entries:
            self._answers.pop(next(iter(self._answers)))
        self._answers[(account, recipient.tax_id)] = (until, recipient)

    def heard(self, payload: str) -> None:
        """A change announced by the table: ``account<TAB>tax_id``, or ``*`` (every answer)."""
        account, _, tax_id = payload.partition("\t")
        if payload == "*" or not tax_id:
            self.generation += 1
            self._answers.clear()
        else:
            self.forget(account, tax_id)

    def forget(self, account: str, tax_id: str) -> None:
        """Drop one answer (changed), and any read of it on its way."""
        self.generation += 1
        self._answers.pop((account, tax_id), None)

    def listening(self) -> None:
        self.generation += 1
        self._answers.clear()
        self._on = True

    def deaf(self) -> None:
        self.generation += 1
        self._on = False
        self._answers.clear()


class RecipientCache:
    """The integrator's recipient answers in PostgreSQL, reused for ``ttl_s`` by every worker;
    with ``memory``, also kept in this process (read from the table once per TTL or change)."""

    def __init__(self, db: Database, ttl_s: float,
                 memory: RecipientMemory | None = None,
                 on_answer: Callable[[str], None] | None = None) -> None:
        self._db = db
        self._ttl_s = ttl_s
        self.memory = memory
        #: Told where each answer used came from: ``memory``, ``table`` or ``integrator``.
        self.on_answer = on_answer or _unobserved

    async def fresh(self, account: str, tax_id: str) -> Recipient | None:
        """The account's cached answer if it is younger than the TTL: from memory, or one
        indexed read (no lock)."""
        memory = self.memory
        generation = 0
        if memory is not None:
            kept = memory.get(account, tax_id)
            if kept is not None:
                self.on_answer("memory")
                return kept
            generation = memory.generation
        row = await self._db.one(q.FRESH_RECIPIENT, {"account": account, "tax_id": tax_id,
                                                     "ttl_s": self._ttl_s})
        if row is None:
            return None
        answer = _recipient(tax_id, row)
        self.on_answer("table")
        if memory is not None:
            memory.keep(account, answer, until=time.monotonic() + self._ttl_s - row.age_s,
                        generation=generation)
        return answer

    async def store(self, account: str, recipient: Recipient) -> None:
        """Keep an account's answer (the newest wins; one short autocommit statement)."""
        await self._db.one(q.STORE_RECIPIENT, {
            "account": account, "tax_id": recipient.tax_id, "registered": recipient.registered,
            "aliases": list(recipient.aliases),
            "despatch_registered": recipient.despatch_registered,
            "despatch_aliases": list(recipient.despatch_aliases)})
        if self.memory is not None:
            # This process reads its own change from now on, before the table's notice comes.
            self.memory.forget(account, recipient.tax_id)


def _unobserved(source: str) -> None:
    """Where an answer came from, told to nobody."""


def _recipient(tax_id: str, row: Any) -> Recipient:
    """A cached answer from its row (FRESH_RECIPIENT's columns)."""
    return Recipient(tax_id, row.registered, tuple(row.aliases), row.despatch_registered,
                     tuple(row.despatch_aliases))


class Router:
    """Routes messages of one worker process (safe for any number of concurrent tasks)."""

    def __init__(self, db: Database, catalog: Catalog, source: RecipientSource,
                 ttl_s: float, memory: RecipientMemory | None = None,
                 on_answer: Callable[[str], None] | None = None) -> None:
        self._db = db
        self._catalog = catalog
        self._source = source
        self.cache = RecipientCache(db, ttl_s, memory, on_answer)

    async def recipient(self, tenant: str, tax_id: str, *, refresh: bool = False) -> Recipient:
        """The recipient answer: cached if fresh (unless ``refresh``), else asked of
        ``tenant``'s integrator account and stored. The cache is per account: a test account and
        a live one answer from different registries.

        Raises RecipientUnavailable when the integrator cannot answer.
        """
        account = self._source.registry_of(tenant)
        if not refresh:
            cached = await self.cache.fresh(account, tax_id)
            if cached is not None:
                return cached
        try:
            answer = await self._source.recipient(tenant, tax_id)
        except IntegratorError as exc:  # transient, breaker open, auth: the message waits
            raise RecipientUnavailable(f"recipient check: {type(exc).__name__}") from exc
        self.cache.on_answer("integrator")
        await self.cache.store(account, answer)
        return answer

    async def defaults(self, tenant: str) -> dict[Channel, str]:
        """The tenant's default series per channel (the catalog's, re-read every
        :data:`gapless.ledger.catalog.DEFAULTS_TTL_S`)."""
        return await self._catalog.defaults(tenant)

    async def _series(self, tenant: str, code: str) -> SeriesSpec:
        spec = await self._catalog.series(tenant, code)
        if spec is None:
            raise UnknownSeriesError(tenant, code)
        return spec

    async def route(self, message: AnyMessage, *, profiled: bool) -> Route:
        """Choose the message's series (and, when routed, channel, profile and alias).

        Raises UnknownSeriesError (the named series does not exist), RoutingRefused (dead-letter)
        or RecipientUnavailable (wait).
        """
        if isinstance(message, DespatchMessage):
            return await self._route_despatch(message, profiled=profiled)
        tenant = message.tenant
        defaults: dict[Channel, str] = {}
        if message.series is not None:
            spec = await self._series(tenant, message.series)
            if spec.channel is Channel.EDESPATCH:
                raise RoutingRefused(f"series: {spec.code} numbers dispatch notes (channel "
                                     "edespatch), not invoices")
            if not profiled or spec.channel not in ROUTED:
                return Route(message, spec, Channel.ANY)
        else:
            defaults = await self.defaults(tenant)
            if not profiled or not ROUTED & defaults.keys():
                code = defaults.get(Channel.ANY)
                if code is None:
                    raise RoutingRefused(f"series: required (tenant {tenant!r} has no default "
                                         "series)")
                spec = await self._series(tenant, code)
                return Route(message.model_copy(update={"series": code}), spec, Channel.ANY)
        recipient = await self.recipient(tenant, message.customer.tax_id)
        channel = Channel.EFATURA if recipient.registered else Channel.EARSIV
        profile = _profile(message, channel)
        alias = _alias(message, recipient, channel)
        if message.series is not None:
            if spec.channel is not channel:
                raise RoutingRefused(
                    f"series: {message.series} numbers {spec.channel.value} documents, but the "
                    f"customer {_who(channel)}, so the document is an {_document(channel)}")
        else:
            code = defaults.get(channel)
            if code is None:
                raise RoutingRefused(
                    f"series: tenant {tenant!r} has no default series of channel "
                    f"{channel.value} (the customer {_who(channel)}; add one with gapless series "
                    f"add {tenant} CODE --channel {channel.value} --default)")
            spec = await self._series(tenant, code)
        customer = message.customer
        if alias != customer.alias:
            customer = customer.model_copy(update={"alias": alias})
        routed = message.model_copy(update={"series": spec.code, "profile": profile,
                                            "customer": customer})
        return Route(routed, spec, channel)

    async def _route_despatch(self, message: DespatchMessage, *, profiled: bool) -> Route:
        """A dispatch note's series (channel ``edespatch``) and alias (the customer's e-İrsaliye
        alias, or GİB's box)."""
        tenant = message.tenant
        if message.series is not None:
            spec = await self._series(tenant, message.series)
            if spec.channel is not Channel.EDESPATCH:
                raise RoutingRefused(
                    f"series: {spec.code} numbers invoices (channel {spec.channel.value}); a "
                    "dispatch note needs a series of channel edespatch")
        else:
            code = (await self.defaults(tenant)).get(Channel.EDESPATCH)
            if code is None:
                raise RoutingRefused(
                    f"series: tenant {tenant!r} has no default series of channel edespatch (add "
                    f"one with gapless series add {tenant} CODE --channel edespatch --default)")
            spec = await self._series(tenant, code)
        if not profiled:
            raise RoutingRefused(NEEDS_PROFILE.format(tenant=tenant))
        recipient = await self.recipient(tenant, message.customer.tax_id)
        alias = _despatch_alias(message, recipient)
        customer = message.customer
        if alias != customer.alias:
            customer = customer.model_copy(update={"alias": alias})
        routed = message.model_copy(update={"series": spec.code, "customer": customer})
        return Route(routed, spec, Channel.EDESPATCH)


#: Why a dispatch note of a tenant without an issuer profile is refused before any number.
NEEDS_PROFILE = ("document: a dispatch note is a UBL-TR DespatchAdvice, and tenant {tenant!r} has "
                 "no issuer profile (set one with gapless tenant set)")


def _despatch_alias(message: DespatchMessage, recipient: Recipient) -> str:
    """A dispatch note's alias: for an e-İrsaliye user the message's alias if it is one of
    theirs, else their first; for anyone else GİB's box."""
    asked = message.customer.alias
    if not recipient.despatch_registered:
        if asked not in (None, GIB_DESPATCH_BOX):
            raise RoutingRefused("customer.alias: the customer is not an e-İrsaliye user (its "
                                 f"dispatch note goes to GİB's box {GIB_DESPATCH_BOX})")
        return GIB_DESPATCH_BOX
    return _registered_alias(asked, recipient.despatch_aliases, "e-İrsaliye")


def _who(channel: Channel) -> str:
    return "is a registered e-Fatura user" if channel is Channel.EFATURA else \
        "is not an e-Fatura user"


def _document(channel: Channel) -> str:
    return "e-Fatura" if channel is Channel.EFATURA else "e-Arşiv"


def _profile(message: InvoiceMessage, channel: Channel) -> str:
    """The document's profile for the channel, or RoutingRefused when the message's
    contradicts it."""
    asked = message.profile
    if channel is Channel.EARSIV:
        if asked not in (None, EARSIV_PROFILE):
            raise RoutingRefused(f"profile: {asked} is an e-Fatura profile, but the customer is "
                                 "not an e-Fatura user (its document is an EARSIVFATURA)")
        return EARSIV_PROFILE
    if asked == EARSIV_PROFILE:
        raise RoutingRefused("profile: EARSIVFATURA, but the customer is a registered e-Fatura "
                             "user (its document is an e-Fatura: TEMELFATURA, TICARIFATURA, "
                             "KAMU or IHRACAT)")
    return asked or EFATURA_PROFILES[0]


def _alias(message: InvoiceMessage, recipient: Recipient, channel: Channel) -> str | None:
    """The e-Fatura alias: the message's if it is one of the recipient's, else their first."""
    asked = message.customer.alias
    if channel is Channel.EARSIV:
        if asked is not None:
            raise RoutingRefused("customer.alias: the customer is not an e-Fatura user (an "
                                 "e-Arşiv document has no alias)")
        return None
    return _registered_alias(asked, recipient.aliases, "e-Fatura")


def _registered_alias(asked: str | None, aliases: tuple[str, ...], kind: str) -> str:
    """A registered user's alias of one kind: the one the message asks for if it is theirs,
    else their first; RoutingRefused when it is not theirs or they list none."""
    if asked is not None:
        if asked not in aliases:
            raise RoutingRefused(f"customer.alias: not one of the customer's {kind} aliases")
        return asked
    if not aliases:
        raise RoutingRefused(f"customer.alias: the integrator lists no {kind} alias for the "
                             "customer")
    return aliases[0]
