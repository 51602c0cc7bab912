"""One-dimensional arrays as statement parameters, written in PostgreSQL's binary array format
by a dumper that knows the element type.

psycopg dumps a plain ``list`` by inspecting it at every call — the element type, the
dimensions, the dumper of the elements, the smallest integer type that holds the numbers —
once to choose the parameter's type and once to write it: about 10 µs of the worker's CPU per
array, 58–64 µs to convert and write the ISSUED group commit's six arrays (23–31 µs with the
dumpers here; docs/benchmarks.md, "Documents written as text, typed arrays"). The group statements
(``intake_invoices``, ``gapless_mark_issued_many``) know their arrays' element types, so they
pass each list as the array it is (:class:`TextArray`, :class:`BytesArray`,
:class:`BigintArray`, :class:`IntegerArray`, :class:`SmallintArray`); its dumper, registered
for psycopg's binary format on every connection, writes the bytes at once. A ``None`` element
is an SQL NULL; the array's type is the element type's array type whatever the values (the
statements cast them anyway).

The binary format (PostgreSQL's ``array_recv``): the number of dimensions (1, or 0 for an empty
array), a flag saying whether any element is NULL, the element type's oid, then per dimension
its length and lower bound (1), then each element as its length (-1: NULL) and its bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.postgres import types
from psycopg.pq import Format

_HEADER = struct.Struct("!iiIii")
_EMPTY = struct.Struct("!iiI")
_LENGTH = struct.Struct("!i")
_NULL = _LENGTH.pack(-1)
_TEXT = types["text"]
_BYTEA = types["bytea"]


class TextArray(list[str | None]):
    """A ``text[]`` parameter."""


class BytesArray(list[bytes | None]):
    """A ``bytea[]`` parameter."""


class BigintArray(list[int | None]):
    """A ``bigint[]`` parameter."""


class IntegerArray(list[int | None]):
    """An ``integer[]`` parameter."""


class SmallintArray(list[int | None]):
    """A ``smallint[]`` parameter."""


def _array(element_oid: int, items: list[bytes | None]) -> bytes:
    """The binary array of ``items`` (each an element's bytes, or None for NULL)."""
    if not items:
        return _EMPTY.pack(0, 0, element_oid)
    parts = [_HEADER.pack(1, None in items, element_oid, len(items), 1)]
    for item in items:
        if item is None:
            parts.append(_NULL)
        else:
            parts += (_LENGTH.pack(len(item)), item)
    return b"".join(parts)


class _TextArrayDumper(Dumper):
    format = Format.BINARY
    oid = _TEXT.array_oid

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        self._encoding = self.connection.info.encoding if self.connection else "utf-8"

    def dump(self, obj: Any) -> bytes:
        encoding = self._encoding
        return _array(_TEXT.oid, [None if item is None else item.encode(encoding) for item in obj])


class _BytesArrayDumper(Dumper):
    format = Format.BINARY
    oid = _BYTEA.array_oid

    def dump(self, obj: Any) -> bytes:
        return _array(_BYTEA.oid, [None if item is None else bytes(item) for item in obj])


def _integers(name: str, code: str) -> type[Dumper]:
    """The dumper of an array of ``name`` integers (``code``: their struct format)."""
    number = struct.Struct("!" + code)
    element_oid = types[name].oid

    class IntegersDumper(Dumper):
        format = Format.BINARY
        oid = types[name].array_oid

        def dump(self, obj: Any) -> bytes:
            return _array(element_oid, [None if item is None else number.pack(item)
                                        for item in obj])

    IntegersDumper.__name__ = f"_{name.capitalize()}ArrayDumper"
    return IntegersDumper


for _cls, _dumper in ((TextArray, _TextArrayDumper), (BytesArray, _BytesArrayDumper),
                      (BigintArray, _integers("int8", "q")),
                      (IntegerArray, _integers("int4", "i")),
                      (SmallintArray, _integers("int2", "h"))):
    # The global map every new connection copies its adapters from.
    psycopg.adapters.register_dumper(_cls, _dumper)
