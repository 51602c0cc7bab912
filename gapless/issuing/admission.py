"""The checks a message passes before any number is used, shared by the worker (which checks the
routed message) and the API (which refuses at once what it can know without the integrator).

* :func:`date_window_problem` — a producer's ``issue_date`` within the window;
* :func:`document_problem` — for a tenant with an issuer profile, a GİB-numbered series and every
  field the UBL-TR document needs (:func:`gapless.documents.check_ubl_inputs`);
* :func:`admission_problem` — the API's question: is there a series the message can be numbered
  in (tenant, named series and its channel, default series), and does it pass the two checks
  above there? Every answer is a one-line reason naming the field (``"<field>: <reason>"``).

A dispatch note is numbered in a series of channel ``edespatch`` (the one it names, or the
tenant's default) and needs the tenant's issuer profile (it is always a UBL-TR document).

A routed tenant's channel is the integrator's answer (is the customer a registered e-Fatura
user?), which the API does not ask: a message is refused at once only when every channel it
could be routed to refuses it; the rest is the worker's to decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from zoneinfo import ZoneInfo

from gapless.constants import EARSIV_PROFILE, Channel
from gapless.documents import check_inputs
from gapless.documents.checks import references_date_problem
from gapless.issuing.routing import EFATURA_PROFILES, NEEDS_PROFILE, ROUTED
from gapless.ledger.catalog import Catalog
from gapless.ledger.tenants import Profile
from gapless.message import AnyMessage, DespatchMessage, InvalidMessage, InvoiceMessage
from gapless.numbers import SeriesSpec, gib_layout_problem

#: How a refusal names each kind of document.
_NOUNS = {"invoice": "invoices", "despatch": "dispatch notes"}


def date_window_problem(issue_date: date, today: date, window_days: int,
                        tz: str) -> str | None:
    """Why a producer's ``issue_date`` cannot be sealed today (None: it can).

    The document is dated the day its number is sealed, in the series' time zone; a requested
    date in the future, or older than the window (the e-Arşiv limit is 7 days), is refused.
    """
    if issue_date > today:
        return f"issue_date: {issue_date} is in the future (today is {today} in {tz})"
    if (today - issue_date).days > window_days:
        return (f"issue_date: {issue_date} is more than {window_days} days before today "
                f"({today} in {tz})")
    return None


def document_problem(message: AnyMessage, series: SeriesSpec,
                     profile: Profile) -> str | None:
    """Why a profiled tenant's message cannot make its UBL-TR document in ``series`` (None: it
    can): the series' layout GİB requires, then the message's fields."""
    problem = gib_layout_problem(series)
    if problem is not None:
        return f"series: {problem} (tenant {message.tenant!r} issues UBL-TR documents)"
    try:
        check_inputs(message, profile.issuer)
    except InvalidMessage as exc:
        return exc.reason
    return None


def numbering_problem(message: AnyMessage, series: SeriesSpec, profile: Profile | None,
                      now: datetime, window_days: int) -> str | None:
    """Why the (routed) message cannot be numbered in ``series`` now (None: it can)."""
    if series.channel.value not in message.channels:
        return (f"series: {series.code} (channel {series.channel.value}) does not number "
                f"{_NOUNS[message.document]}; use a series of channel "
                f"{' or '.join(sorted(message.channels))}")
    today = now.astimezone(ZoneInfo(series.tz)).date()  # ZoneInfo caches by key
    problem = (date_window_problem(message.issue_date, today, window_days, series.tz)
               or references_date_problem(message, today, series.tz))
    if problem is not None:
        return problem
    if profile is None:
        return NEEDS_PROFILE.format(tenant=message.tenant) if message.ubl_only else None
    return document_problem(message, series, profile)


@dataclass(frozen=True)
class _Candidate:
    """A series the message may be numbered in, and the message as routing would shape it."""

    series: SeriesSpec
    message: AnyMessage


def _possible_channels(message: InvoiceMessage) -> tuple[Channel, ...]:
    """The channels a routed message may take, judged from the message alone: an
    ``EARSIVFATURA`` profile is an e-Arşiv document; an e-Fatura profile or an alias is an
    e-Fatura one (routing refuses it otherwise); anything else is the recipient check's to say."""
    if message.profile == EARSIV_PROFILE:
        return (Channel.EARSIV,)
    if message.profile is not None or message.customer.alias is not None:
        return (Channel.EFATURA,)
    return (Channel.EFATURA, Channel.EARSIV)


def _shaped(message: InvoiceMessage, series: SeriesSpec, channel: Channel) -> InvoiceMessage:
    """The message as routing writes it for ``channel`` (its alias, when the integrator chooses
    it, is left as the message has it)."""
    update: dict[str, object] = {"series": series.code}
    if channel is Channel.EARSIV:
        update["profile"] = EARSIV_PROFILE
    elif channel is Channel.EFATURA:
        update["profile"] = message.profile or EFATURA_PROFILES[0]
    return message.model_copy(update=update)


async def _unknown(catalog: Catalog, tenant: str, reason: str) -> str:
    if not await catalog.tenant_exists(tenant):
        return f"tenant: unknown tenant {tenant!r} (it has no series; add one with gapless " \
               "series add)"
    return reason


async def _despatch_candidates(catalog: Catalog,
                               message: DespatchMessage) -> list[_Candidate] | str:
    """The series a dispatch note may be numbered in (channel ``edespatch``), or why there is
    none (the series' channel itself is checked with the rest, :func:`numbering_problem`)."""
    tenant = message.tenant
    code = message.series
    if code is None:
        code = (await catalog.defaults(tenant)).get(Channel.EDESPATCH)
        if code is None:
            return await _unknown(catalog, tenant, f"series: tenant {tenant!r} has no default "
                                  "series of channel edespatch (add one with gapless series "
                                  f"add {tenant} CODE --channel edespatch --default)")
    spec = await catalog.series(tenant, code)
    if spec is None:
        return await _unknown(catalog, tenant, f"series: tenant {tenant!r} has no series "
                                               f"{code!r}")
    return [_Candidate(spec, message.model_copy(update={"series": code}))]


async def _candidates(catalog: Catalog, message: AnyMessage,
                      profile: Profile | None) -> list[_Candidate] | str:
    """The series the message may be numbered in, or why there is none."""
    if isinstance(message, DespatchMessage):
        return await _despatch_candidates(catalog, message)
    tenant = message.tenant
    if message.series is not None:
        spec = await catalog.series(tenant, message.series)
        if spec is None:
            return await _unknown(catalog, tenant, f"series: tenant {tenant!r} has no series "
                                                   f"{message.series!r}")
        if profile is None or spec.channel not in ROUTED:
            return [_Candidate(spec, message)]  # an edespatch series: numbering_problem says
        channels = _possible_channels(message)
        if spec.channel not in channels:
            document = "an e-Fatura" if spec.channel is Channel.EARSIV else "an e-Arşiv"
            made = (f"profile {message.profile}" if message.profile is not None
                    else "customer.alias")
            return (f"series: {spec.code} numbers {spec.channel.value} documents, but the "
                    f"message's {made} makes {document} document")
        return [_Candidate(spec, _shaped(message, spec, spec.channel))]
    defaults = await catalog.defaults(tenant)
    if profile is None or not ROUTED & defaults.keys():
        code = defaults.get(Channel.ANY)
        if code is None:
            return await _unknown(catalog, tenant, f"series: required (tenant {tenant!r} has no "
                                                   "default series)")
        spec = await catalog.series(tenant, code)
        return "series: the default series was removed" if spec is None else \
            [_Candidate(spec, message.model_copy(update={"series": code}))]
    found: list[_Candidate] = []
    channels = _possible_channels(message)
    for channel in channels:
        code = defaults.get(channel)
        spec = None if code is None else await catalog.series(tenant, code)
        if spec is not None:
            found.append(_Candidate(spec, _shaped(message, spec, channel)))
    if not found:
        named = " or ".join(channel.value for channel in channels)
        return (f"series: tenant {tenant!r} has no default series of channel {named} (add one "
                f"with gapless series add {tenant} CODE --channel {channels[0].value} "
                "--default)")
    return found


async def admission_problem(catalog: Catalog, message: AnyMessage, now: datetime,
                            window_days: int) -> str | None:
    """Why the API refuses the message at once (None: it is published for the worker).

    Refused when the tenant is unknown, the named series does not exist or cannot number the
    document the message asks for, no default series fits, or — in every series the message may
    be numbered in — its ``issue_date`` is outside the window or its UBL-TR document cannot be
    made (the reason given is the first series'). Reads only the catalog's caches, but on a miss.
    """
    profile = await catalog.profile_in_force(message.tenant)
    candidates = await _candidates(catalog, message, profile)
    if isinstance(candidates, str):
        return candidates
    problems = [numbering_problem(candidate.message, candidate.series, profile, now,
                                  window_days) for candidate in candidates]
    if all(problem is not None for problem in problems):
        return problems[0]
    return None
