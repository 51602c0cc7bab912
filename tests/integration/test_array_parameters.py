"""The group statements' array parameters (gapless.ledger.arrays) reach PostgreSQL as the
values they hold: every element, NULLs, empty arrays, any text PostgreSQL can store, any bytes,
the integer types' bounds — and the bytes are psycopg's own for the same list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.adapt import PyFormat, Transformer

from gapless.ledger.arrays import BigintArray, BytesArray, IntegerArray, SmallintArray, TextArray
from gapless.ledger.conninfo import driver_conninfo

#: Text PostgreSQL stores: any character but NUL (and lone surrogates, which UTF-8 cannot hold).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(driver_conninfo(db_url),
                         autocommit=True) as connection:
        yield connection


def round_trip(conn: psycopg.Connection[Any], value: list[Any], cast: str) -> Any:
    row = conn.execute(f"SELECT %(value)b::{cast}", {"value": value}, prepare=True).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize(("array", "cast", "values"), [
    (TextArray, "text[]", ["a", "ğüşİı €", None, "", "x" * 100_000]),
    (TextArray, "jsonb[]", ['{"a": "ğ", "n": 1.50}', None, "[]"]),
    (BytesArray, "bytea[]", [b"x\x00y", None, b"", bytes(range(256)) * 40]),
    (BigintArray, "bigint[]", [2**63 - 1, -(2**63), None, 0]),
    (IntegerArray, "integer[]", [2**31 - 1, -(2**31), None]),
    (SmallintArray, "smallint[]", [32767, -32768, None, 5]),
    (TextArray, "text[]", []),
    (BigintArray, "bigint[]", []),
    (TextArray, "text[]", [None]),
])
def test_every_element_arrives(conn: psycopg.Connection[Any], array: type[list[Any]], cast: str,
                               values: list[Any]) -> None:
    got = round_trip(conn, array(values), cast)
    assert got == ([None if v is None else json.loads(v) for v in values] if cast == "jsonb[]"
                   else values)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # a URL: nothing to reset
@given(st.lists(st.none() | TEXT, max_size=8))
def test_any_text_arrives_and_is_written_as_psycopg_writes_it(db_url: str,
                                                               values: list[str | None]) -> None:
    with psycopg.connect(driver_conninfo(db_url),
                         autocommit=True) as conn:
        assert round_trip(conn, TextArray(values), "text[]") == values
        if any(value is not None for value in values):  # else psycopg writes text: '{NULL}'
            transformer = Transformer(conn)
            assert bytes(transformer.get_dumper(TextArray(values), PyFormat.BINARY)
                         .dump(TextArray(values))) == \
                bytes(transformer.get_dumper(values, PyFormat.BINARY).dump(values))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.none() | st.binary(max_size=64), max_size=8),
       st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=8))
def test_any_bytes_and_integers_arrive(db_url: str, blobs: list[bytes | None],
                                       numbers: list[int | None]) -> None:
    with psycopg.connect(driver_conninfo(db_url),
                         autocommit=True) as conn:
        assert round_trip(conn, BytesArray(blobs), "bytea[]") == blobs
        assert round_trip(conn, BigintArray(numbers), "bigint[]") == numbers
