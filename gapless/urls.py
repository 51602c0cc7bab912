"""URLs of the services: a comma-separated list of RabbitMQ nodes, and any URL (amqp,
postgresql, http) shown without its password."""

from __future__ import annotations

import re
import urllib.parse

from yarl import URL

_PASSWORD_PARAMETER = re.compile(r"((?:^|[&\s])password=)[^&\s]*")


_USERINFO_PASSWORD = re.compile(r"(//[^:/@]*):[^@/]*@")


def redact_url(url: str) -> str:
    """Any URL (amqp, postgresql, http) without its password, for messages and logs; every URL
    of a comma-separated list (the RabbitMQ nodes of ``GAPLESS_AMQP_URL``).

    Both places a password can hide are masked: ``user:password@`` and a ``password=`` query
    parameter (libpq accepts one).
    """
    urls = split_urls(url)
    if len(urls) > 1:
        return ",".join(_redact_one(part) for part in urls)
    return _redact_one(url)


def _redact_one(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # unparsable (a bad IPv6 host): mask what looks like a password
        return _PASSWORD_PARAMETER.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1:***@", url))
    if not parts.netloc:  # not a URL (a key=value DSN): mask what looks like a password
        return _PASSWORD_PARAMETER.sub(r"\1***", url)
    if password is not None:
        host = parts.netloc.rsplit("@", 1)[-1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    if parts.query:
        parts = parts._replace(query=_PASSWORD_PARAMETER.sub(r"\1***", parts.query))
    return urllib.parse.urlunsplit(parts)


#: A comma that starts the next URL (a PostgreSQL multi-host URL has commas inside one URL).
_NEXT_URL = re.compile(r",\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)")


def split_urls(setting: str) -> list[str]:
    """``"amqp://a/,amqp://b/"`` → ``["amqp://a/", "amqp://b/"]`` (blanks dropped)."""
    return [part.strip() for part in _NEXT_URL.split(setting) if part.strip()]


def node_urls(setting: str) -> list[str]:
    """The node URLs of ``GAPLESS_AMQP_URL``; ValueError when one is not an AMQP URL."""
    urls = split_urls(setting)
    if not urls:
        raise ValueError("no RabbitMQ URL given")
    for url in urls:
        if not re.match(r"amqps?://", url):
            raise ValueError(f"not an amqp:// or amqps:// URL: {url.split('@')[-1]!r}")
    return urls


def node_label(url: URL | str) -> str:
    """``host:port`` of a node, for logs (never a password)."""
    parsed = URL(str(url))
    return f"{parsed.host}:{parsed.port or 5672}"
