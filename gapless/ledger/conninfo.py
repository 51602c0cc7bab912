"""``GAPLESS_DATABASE_URL`` as libpq reads it: multi-host URLs passed through intact (a primary
and its standbys, ``target_session_attrs=read-write``), the database a URL names, and the same
URL on another database. libpq parses the URL, never SQLAlchemy, whose URL has one host.
"""

from __future__ import annotations

import urllib.parse

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gapless.errors import ConfigurationError

#: URL schemes libpq reads (``postgres://`` is its alias of ``postgresql://``).
_LIBPQ_SCHEMES = ("postgresql", "postgres")


def libpq_url(database_url: str) -> str:
    """GAPLESS_DATABASE_URL as libpq reads it: every host, port and parameter intact (a
    multi-host URL ``postgresql://u@h1:5441,h2:5442/db?target_session_attrs=read-write`` is
    passed through as written); only a SQLAlchemy-style driver suffix in the scheme
    (``postgresql+psycopg://``) is dropped. A ``key=value`` connection string is returned as
    it is.

    libpq parses the URL, never SQLAlchemy: SQLAlchemy's URL has one host and one port, and a
    second host would be lost (or refused) on the way.
    """
    scheme, separator, rest = database_url.partition("://")
    base = scheme.split("+", 1)[0]
    if separator and base in _LIBPQ_SCHEMES and base != scheme:
        return f"{base}://{rest}"
    return database_url


def conninfo_parts(database_url: str) -> dict[str, str]:
    """The connection parameters libpq reads from the URL (``host`` and ``port`` comma-separated
    for a multi-host URL). Raises ConfigurationError when libpq cannot parse it."""
    try:
        return {key: str(value) for key, value in
                conninfo_to_dict(libpq_url(database_url)).items()}
    except psycopg.ProgrammingError as exc:
        from gapless.urls import redact_url

        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(f"GAPLESS_DATABASE_URL {redact_url(database_url)} is not a "
                                 f"PostgreSQL connection URL: {detail}") from None


def database_name(database_url: str) -> str | None:
    """The database the URL names (None: none named, libpq then takes the user's name)."""
    return conninfo_parts(database_url).get("dbname") or None


def with_database(database_url: str, dbname: str) -> str:
    """The same URL on database ``dbname`` of the same servers: every host, port, user,
    password and parameter (``target_session_attrs``, ``sslmode`` …) kept as written.

    The path of the URL is replaced (and a ``dbname=`` query parameter, which libpq would read
    instead, dropped); a ``key=value`` connection string gets ``dbname`` set.
    """
    conninfo_parts(database_url)  # refuse what libpq cannot read, before cutting it up
    url = libpq_url(database_url)
    scheme, separator, rest = url.partition("://")
    if not separator:
        return make_conninfo(url, dbname=dbname)
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    tail = tail.split("#", 1)[0]
    query = tail.partition("?")[2]
    kept = "&".join(part for part in query.split("&")
                    if part and part.split("=", 1)[0] != "dbname")
    path = "/" + urllib.parse.quote(dbname, safe="")
    return f"{scheme}://{netloc}{path}" + (f"?{kept}" if kept else "")


def driver_conninfo(database_url: str, *, dbname: str | None = None) -> str:
    """The URL as psycopg/libpq take it (:func:`libpq_url`), on database ``dbname`` of the same
    servers when given (:func:`with_database`: every host and parameter kept)."""
    if dbname is not None:
        return with_database(database_url, dbname)
    url = libpq_url(database_url)
    conninfo_parts(url)
    return url
