"""JSON text with exact numbers and bounded nesting: how messages, stored payloads and integrator
answers are read and written.

* **Exact numbers.** A JSON number with a fraction or an exponent is read as a ``Decimal``, never
  a binary float, and written back in plain decimal notation (:func:`number_text`): the text
  PostgreSQL's ``jsonb`` keeps for it, so a payload reads back from the database with the very
  digits it was stored with (``0.1000000000000000055511151231257827`` stays that, not ``0.1``).
* **Bounded nesting.** :func:`loads` refuses a value nested deeper than asked, before anything
  walks it; a body nested deeper than the interpreter's stack is refused the same way (the
  decoder's ``RecursionError`` never escapes).

Both are pure functions; a malformed text raises :class:`NotJson` (a ``ValueError``) with a
short reason that never quotes the text.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from decimal import Decimal
from json.encoder import encode_basestring as _encode_string
from typing import Any

#: A number written out in plain notation may have at most this many characters (digits, point
#: and sign): an exponent cannot make a small text into a huge number.
MAX_NUMBER_TEXT = 100


class NotJson(ValueError):
    """The text is not JSON, or nests deeper than allowed; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TooDeep(NotJson):
    """The value nests deeper than allowed."""


class _HasDecimal(Exception):
    """Raised by the fast encoder's ``default`` hook: the value needs the exact encoder."""


def number_text(value: Decimal) -> str:
    """A finite Decimal in plain notation, as PostgreSQL's ``numeric`` writes it: no exponent,
    its scale kept (``1.50`` stays ``1.50``, ``1E+2`` is ``100``), no sign on a zero."""
    if value.is_zero():
        value = value.copy_abs()
    return format(value, "f")


def plain_length(value: Decimal) -> int:
    """How many characters :func:`number_text` writes for a finite ``value``, without writing
    them (digits, a point, a sign)."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    if exponent >= 0:
        return sign + len(digits) + exponent
    return sign + max(len(digits), -exponent + 1) + 1  # the digits, a "0." where needed


def loads(text: str | bytes, *, max_depth: int,
          object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
          parse_constant: Callable[[str], Any] | None = None,
          parse_int: Callable[[str], Any] | None = None,
          parse_float: Callable[[str], Any] = Decimal) -> Any:
    """The JSON value of ``text``, numbers with a fraction or exponent as ``Decimal`` (or what
    ``parse_float`` makes of their text; integers what ``parse_int`` makes); at most
    ``max_depth`` levels of objects and arrays. Raises NotJson (the hooks' own exceptions pass
    through)."""
    try:
        if isinstance(text, bytes):  # as json.loads reads bytes: UTF-8, -16 or -32 by its start
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        elif text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _decoder(object_pairs_hook, parse_constant, parse_int, parse_float).decode(text)
    except RecursionError:
        raise TooDeep(f"nests more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise NotJson(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                      ) from None
    except UnicodeDecodeError:
        raise NotJson("not valid UTF-8") from None
    if not nests_at_most(text, value, max_depth):
        raise TooDeep(f"nests more than {max_depth} levels deep")
    return value


@functools.lru_cache(maxsize=8)
def _decoder(object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None,
             parse_constant: Callable[[str], Any] | None,
             parse_int: Callable[[str], Any] | None,
             parse_float: Callable[[str], Any]) -> json.JSONDecoder:
    """A decoder with these hooks, made once: ``json.loads`` with any hook makes a new decoder
    and scanner at every call (a third of decoding a small message)."""
    return json.JSONDecoder(parse_float=parse_float, parse_int=parse_int,
                            object_pairs_hook=object_pairs_hook, parse_constant=parse_constant)


def nests_at_most(text: str | bytes, value: Any, levels: int) -> bool:
    """Whether ``value``, decoded from ``text``, has at most ``levels`` levels of objects and
    arrays: counted in the text when it opens no more than that many, else measured."""
    return _openings(text) <= levels or nests_within(value, levels)


def _openings(text: str | bytes) -> int:
    """How many objects and arrays ``text`` may open at most (brackets inside strings count
    too): a text with no more than ``max_depth`` cannot nest deeper, and the walk of the parsed
    value is skipped (two C-level counts instead of a visit of every value)."""
    if isinstance(text, bytes):
        return text.count(b"{") + text.count(b"[")
    return text.count("{") + text.count("[")


#: What nests (a tuple: ``isinstance`` with one is cheaper than with a union).
_CONTAINERS = (dict, list, tuple)


def nests_within(value: Any, max_depth: int) -> bool:
    """Whether ``value`` has at most ``max_depth`` levels of dicts and lists (level by level,
    without recursion: any depth is measured; each level's containers are picked out by one
    comprehension, not a visit of every value)."""
    level: list[Any] = [value]
    depth = 0
    while True:
        containers = [item for item in level if isinstance(item, _CONTAINERS)]
        if not containers:
            return True
        if depth >= max_depth:
            return False
        level = []
        for container in containers:
            level.extend(container.values() if isinstance(container, dict) else container)
        depth += 1


def _refuse_decimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        raise _HasDecimal
    raise TypeError(f"{type(value).__name__} is not JSON")


#: The fast encoders, by ``sort_keys``, made once (``json.dumps`` with any option makes one at
#: every call).
_ENCODERS = {sort_keys: json.JSONEncoder(ensure_ascii=False, separators=(",", ":"),
                                         sort_keys=sort_keys, allow_nan=False,
                                         default=_refuse_decimal)
             for sort_keys in (False, True)}


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """Compact JSON (UTF-8 text, no ASCII escaping) of ``value``; Decimals as exact numbers
    (:func:`number_text`). Raises TypeError for a value JSON has no form for, ValueError for a
    NaN or an infinity."""
    try:
        return _ENCODERS[sort_keys].encode(value)
    except _HasDecimal:
        # Rare (a producer's own number with a fraction): the exact, slower encoder.
        parts: list[str] = []
        _encode(value, parts.append, sort_keys)
        return "".join(parts)


def _encode(value: Any, out: Callable[[str], object], sort_keys: bool) -> None:
    if isinstance(value, str):
        out(_encode_string(value))
    elif value is None or isinstance(value, bool | int | float):
        out(json.dumps(value, allow_nan=False))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("NaN and Infinity are not JSON")
        out(number_text(value))
    elif isinstance(value, dict):
        out("{")
        for index, key in enumerate(sorted(value) if sort_keys else value):
            if not isinstance(key, str):
                raise TypeError("object keys must be strings")
            out("," if index else "")
            out(_encode_string(key))
            out(":")
            _encode(value[key], out, sort_keys)
        out("}")
    elif isinstance(value, list | tuple):
        out("[")
        for index, item in enumerate(value):
            out("," if index else "")
            _encode(item, out, sort_keys)
        out("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON")
