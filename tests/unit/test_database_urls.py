"""GAPLESS_DATABASE_URL in every form libpq reads — multi-host URLs with
``target_session_attrs`` above all — reaches libpq intact, keeps its hosts when the database is
changed, and never shows its password."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from gapless.errors import ConfigurationError
from gapless.ledger.conninfo import (
    conninfo_parts,
    database_name,
    driver_conninfo,
    libpq_url,
    with_database,
)
from gapless.ledger.database import make_engine, make_sync_engine
from gapless.urls import redact_url

PAIR = "postgresql://gapless:s3cret@10.0.0.1:5441,10.0.0.2:5442/gapless?target_session_attrs=read-write"


def test_a_multi_host_url_reaches_libpq_with_every_host() -> None:
    assert libpq_url(PAIR) == PAIR
    parts = conninfo_parts(PAIR)
    assert parts["host"] == "10.0.0.1,10.0.0.2"
    assert parts["port"] == "5441,5442"
    assert parts["target_session_attrs"] == "read-write"
    assert (parts["user"], parts["password"], parts["dbname"]) == ("gapless", "s3cret", "gapless")
    assert driver_conninfo(PAIR) == PAIR


@pytest.mark.parametrize(("scheme", "base"), [("postgresql+psycopg", "postgresql"),
                                             ("postgresql+psycopg2", "postgresql"),
                                             ("postgres+psycopg", "postgres")])
def test_a_driver_suffix_is_dropped_and_nothing_else(scheme: str, base: str) -> None:
    url = f"{scheme}://u@h1:1,h2:2/db?sslmode=disable"
    assert libpq_url(url) == f"{base}://u@h1:1,h2:2/db?sslmode=disable"


def test_changing_the_database_keeps_every_host_and_parameter() -> None:
    other = with_database(PAIR, "postgres")
    assert other == ("postgresql://gapless:s3cret@10.0.0.1:5441,10.0.0.2:5442/postgres"
                     "?target_session_attrs=read-write")
    assert database_name(other) == "postgres"
    assert conninfo_to_dict(other)["host"] == "10.0.0.1,10.0.0.2"


@pytest.mark.parametrize(("url", "expected"), [
    # a dbname query parameter would win over the path: it goes
    ("postgresql://u@h1,h2/a?dbname=a&target_session_attrs=primary",
     "postgresql://u@h1,h2/b?target_session_attrs=primary"),
    # no path at all, a query only
    ("postgresql://u@h1:1,h2:2?target_session_attrs=read-write",
     "postgresql://u@h1:1,h2:2/b?target_session_attrs=read-write"),
    # percent-encoded values stay as written
    ("postgresql://u@[::1]:5432,h2/a?options=-c%20gapless.x%3D1",
     "postgresql://u@[::1]:5432,h2/b?options=-c%20gapless.x%3D1"),
    ("postgres://h/a", "postgres://h/b"),
])
def test_with_database_rewrites_only_the_database(url: str, expected: str) -> None:
    assert with_database(url, "b") == expected
    assert database_name(expected) == "b"


def test_a_database_name_that_needs_quoting_is_quoted() -> None:
    url = with_database("postgresql://h1,h2/x", "odd name/ü")
    assert database_name(url) == "odd name/ü"


def test_a_key_value_connection_string_works_too() -> None:
    dsn = "host=h1,h2 port=1,2 dbname=a target_session_attrs=read-write"
    changed = with_database(dsn, "b")
    assert conninfo_to_dict(changed) == {"host": "h1,h2", "port": "1,2", "dbname": "b",
                                         "target_session_attrs": "read-write"}
    assert database_name(dsn) == "a"


def test_a_url_libpq_cannot_read_is_a_configuration_error_without_its_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        conninfo_parts("postgresql://u:s3cret@h1,h2/db?no_such_option=1")
    assert "no_such_option" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ConfigurationError):
        with_database("postgresql://u:s3cret@h/db?no_such_option=1", "x")


@pytest.mark.parametrize(("url", "shown"), [
    (PAIR, "postgresql://gapless:***@10.0.0.1:5441,10.0.0.2:5442/gapless"
           "?target_session_attrs=read-write"),
    ("postgresql://u:p@[::1]:5,[::2]:6/db?password=x&target_session_attrs=read-write",
     "postgresql://u:***@[::1]:5,[::2]:6/db?password=***&target_session_attrs=read-write"),
    ("postgresql://u@h1,h2/db", "postgresql://u@h1,h2/db"),
    ("host=h1,h2 password=x dbname=d", "host=h1,h2 password=*** dbname=d"),
])
def test_a_multi_host_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


async def test_engines_take_a_multi_host_url_without_connecting() -> None:
    engine = make_engine(PAIR, actor="test")
    try:
        assert engine.dialect.driver == "psycopg"
    finally:
        await engine.dispose()
    make_sync_engine(PAIR).dispose()
