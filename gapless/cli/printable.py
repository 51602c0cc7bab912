"""The one way the CLI prints: every value from outside — a message, the database, the broker,
the integrator and GİB, what a server or a metrics endpoint says of itself, an exception's
message — is shown as text on an operator's terminal, never as markup or terminal control.

* :func:`printable` writes every control character (C0 with tab and newline, DEL, C1), every
  bidirectional mark or override, the line and paragraph separators (U+2028, U+2029) and every
  lone surrogate as a visible escape (``\\x1b``, ``\\u202e``), so a value can neither move the
  cursor, clear the screen, open a hyperlink, reorder what is shown around it nor break the
  line it is on; text without such characters prints exactly as it is.
* :func:`echo` prints one line (through :func:`printable`); :func:`echo_json` one JSON
  document in which those characters are JSON escapes, so it stays valid JSON.
* :func:`console` is the rich console for tables and styled lines: markup, emoji codes and
  highlighting are off, and every ``str`` it renders — a cell, a title, a printed line — goes
  through :func:`printable` first. :func:`plain` is a value as a rich ``Text`` for code that
  builds ``Text`` itself.

No command writes to stdout or stderr by other means (``tests/unit/test_cli_output.py`` reads
the sources to hold that), so a new command cannot forget it. The one exception is the bytes of
``gapless invoice show --document``, which are the document byte for byte.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import TYPE_CHECKING, Any

import typer

from gapless.escape import printable

__all__ = ["console", "echo", "echo_json", "json_text", "plain", "printable"]

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

#: What ``json.dumps(ensure_ascii=False)`` leaves raw that :data:`_UNSAFE` names (it escapes C0
#: controls itself; outside strings there is only ASCII punctuation, digits and whitespace).
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                             "\u2066-\u2069\ud800-\udfff]")


def _json_escape(found: re.Match[str]) -> str:
    return f"\\u{ord(found.group()):04x}"


def plain(text: str) -> Text:
    """``text`` as a rich Text: printable, and never read as markup."""
    from rich.text import Text

    return Text(printable(text))


def echo(line: str, *, err: bool = False) -> None:
    """Print ``line`` (on stderr with ``err``) as one line of text."""
    typer.echo(printable(line), err=err)


def json_text(data: Any, *, indent: int | None = None, ensure_ascii: bool = True) -> str:
    """``data`` as JSON (``default=str``) that prints safely: with ``ensure_ascii`` every
    non-ASCII character is a ``\\u`` escape; without, letters such as ``ş`` stay as they are and
    only the characters :func:`printable` escapes become ``\\u`` escapes. Valid JSON either way."""
    text = json.dumps(data, indent=indent, default=str, ensure_ascii=ensure_ascii)
    return text if ensure_ascii else _UNSAFE_IN_JSON.sub(_json_escape, text)


def echo_json(data: Any, *, indent: int | None = None, ensure_ascii: bool = True) -> None:
    """Print ``data`` as one JSON document on stdout (see :func:`json_text`)."""
    typer.echo(json_text(data, indent=indent, ensure_ascii=ensure_ascii))


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A rich console that shows every ``str`` as printable text: no markup, no emoji codes, no
    highlighting. Style comes only from ``Text`` objects and ``style=`` arguments."""
    return _text_console()(stderr=stderr, width=width, markup=False, emoji=False,
                           highlight=False)


@cache
def _text_console() -> type[Console]:
    # Built on first use: rich is imported only by commands that print with it.
    from rich.console import Console

    class TextConsole(Console):
        """Every ``str`` rendered — printed, a table cell, a title — goes through printable."""

        def render_str(self, text: str, **options: Any) -> Text:
            options.update(markup=False, emoji=False, highlight=False)
            return super().render_str(printable(text), **options)

    return TextConsole
