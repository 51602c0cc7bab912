"""What the CLI prints of values from outside (STYLE 19): control and bidirectional characters
as visible escapes, ``[...]`` as itself rather than rich markup — in ``gapless status``, ``gapless
dead list`` and ``gapless doctor`` — and ordinary text exactly as it is."""

from __future__ import annotations

import io

import pytest

from gapless.cli.dead import letters_table
from gapless.cli.doctor import check_line
from gapless.cli.printable import console, plain, printable
from gapless.cli.status import render
from gapless.ops.dead import DeadLetter, DeadLetters
from gapless.ops.doctor import FAIL, Check
from gapless.ops.status import (
    BreakerStatus,
    GibRefusal,
    ProfileStatus,
    QueueStatus,
    SeriesStatus,
    Status,
)

HOSTILE = "a[bold]b[/bold]\x1b[2J\x1b]8;;http://x\x07c\u202ed\n\te"
SHOWN = r"a[bold]b[/bold]\x1b[2J\x1b]8;;http://x\x07c\u202ed\x0a\x09e"


def printed(renderable: object, width: int = 200) -> str:
    """What the CLI's console (:func:`gapless.cli.printable.console`) prints of it."""
    out = io.StringIO()
    shown = console(width=width)
    shown.file = out
    shown.print(renderable)
    return out.getvalue()


@pytest.mark.parametrize("text", ["", "ABC2026000000001", "Örnek Ltd. Şti., İstanbul — 10 €",
                                  "inv-1/2 (x) {y} <z>"])
def test_ordinary_text_is_left_as_it_is(text: str) -> None:
    assert printable(text) == text
    assert printed(plain(text)) == text + "\n"


def test_controls_and_direction_marks_become_escapes() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("\x00\x7f\x85\u2066") == r"\x00\x7f\x85\u2066"
    assert printed(plain(HOSTILE)) == SHOWN + "\n"


def test_status_prints_values_from_outside_as_text() -> None:
    series = SeriesStatus("acme[red]", "A[b]C", "2026", 1, "ABC\x1b[31m1", 0, 0, 1, 1, 0, 0, 0,
                          1, None, 1, 0, 0)
    status = Status(
        "2026-11-20T09:30:15+00:00", [series],
        QueueStatus("q", 1, dead_queue="q.dead", dead_letters=0, note="note\x1b[1m"),
        breakers=[BreakerStatus("http://w:9100/metrics", "integrator[i]\x1b", "open")],
        profiles=[ProfileStatus("acme", 1, "Acme [b]Ltd[/b]", "Kadıköy", "İstanbul\x07")],
        gib_refused=[GibRefusal("acme", "ABC", "ABC1", "inv[1]", HOSTILE, None, "todo")])
    shown = printed(render(status))
    assert "\x1b" not in shown
    assert "\x07" not in shown
    for text in ("acme[red]/A[b]C", r"ABC\x1b[31m1", r"note\x1b[1m", r"integrator[i]\x1b",
                 "Acme [b]Ltd[/b], Kadıköy tax office, İstanbul\\x07 (UBL-TR)",
                 f"ABC1  inv[1]: {SHOWN}", r"alarms (error!): acme[red]/A[b]C: 1"):
        assert text in shown.replace("\n", ""), text


def test_dead_list_prints_the_messages_words_as_text() -> None:
    letter = DeadLetter(1, "inv[b]1", HOSTILE, "2026-11-20T09:30:15\x1b[2J", None, None, None,
                        None, 10)
    shown = printed(letters_table(DeadLetters("q.dead", 1, [letter])), width=400)
    assert "\x1b" not in shown
    assert "inv[b]1" in shown
    assert SHOWN in shown
    assert "2026-11-20 09:30:15" in shown


def test_doctor_lines_print_what_a_service_said_as_text() -> None:
    check = Check("postgres", FAIL, "PostgreSQL 15\x1b[2J at x", "hint\u202e")
    assert check_line(check) == r"FAIL  postgres    PostgreSQL 15\x1b[2J at x; hint: hint\u202e"
