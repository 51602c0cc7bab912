"""Text that is safe on an operator's terminal: what the CLI prints and what the console log
format writes go through :func:`printable` (gapless.cli.printable, gapless.logging).

Every control character (C0 with tab and newline, DEL, C1), every bidirectional mark or
override, the line and paragraph separators (U+2028, U+2029) and every lone surrogate is written
as a visible escape (``\\x1b``, ``\\u202e``), so a value can neither move the cursor, clear the
screen, open a hyperlink, reorder what is shown around it nor break the line it is on; text
without such characters is returned as it is.
"""

from __future__ import annotations

import re

#: C0 controls (tab and newline included: one value, one line), DEL, C1 controls, the
#: bidirectional marks, embeddings, overrides and isolates, the line and paragraph separators,
#: and lone surrogates (which no terminal encoding can write).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                    "\u2066-\u2069\ud800-\udfff]")


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control, bidirectional, separator and surrogate character written as
    an escape."""
    return UNSAFE.sub(_escape, text)
