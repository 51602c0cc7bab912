"""Text from outside — message bodies, headers, the integrator's and GİB's words, what a server
or a metrics endpoint says of itself — made safe to print on an operator's terminal.

:func:`printable` writes every control character (C0, DEL, C1) and every bidirectional override
as a visible escape (``\\x1b``, ``\\u202e``), so a value can neither move the cursor, clear the
screen, open a hyperlink nor reorder what is shown around it; :func:`plain` also keeps rich from
reading ``[...]`` as markup. Text without such characters prints exactly as before.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

#: C0 controls (tab and newline included: one value, one line), DEL, C1 controls, and the
#: bidirectional marks, embeddings, overrides and isolates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control and bidirectional character written as an escape."""
    return _UNSAFE.sub(_escape, text)


def plain(text: str) -> Text:
    """``text`` as a rich Text: printable, and never read as markup."""
    from rich.text import Text

    return Text(printable(text))
