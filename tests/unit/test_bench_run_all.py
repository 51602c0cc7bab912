"""bench/run_all.py's document handling: generated tables replaced, hand-written prose kept."""

from __future__ import annotations

from bench.run_all import (
    EARLIER,
    Outcome,
    capture,
    discover,
    end_marker,
    find_marked,
    regenerate,
    start_marker,
)

WHEN = "2026-11-22 10:00 UTC"
TABLE = "**Reservations per second**\n\n| a | b |\n|---|---|\n| 1 | 2 |"


def outcome(name: str, captured: str = TABLE, code: int = 0) -> Outcome:
    return Outcome(name, f".venv/bin/python bench/{name}.py", code, 12.0, captured,
                   "Traceback ...\nboom")


def test_capture_keeps_context_and_tables_but_not_progress_or_json() -> None:
    output = ("  1x8: jit 10/s\nmachine: Linux, 2 cores; 5 s per cell\n"
              "**Title**\n\n| a |\n|---|\n| 1 |\n\n"
              '{"rows": [1]}\nnote: ideal = 40/s\n\n')
    assert capture(output) == ("machine: Linux, 2 cores; 5 s per cell\n\n**Title**\n\n| a |\n"
                               "|---|\n| 1 |\n\nnote: ideal = 40/s")


def test_discover_skips_helpers() -> None:
    names = discover()
    assert "reserve" in names
    assert not {"harness", "run_all", "__init__"} & set(names)


def test_a_new_document_gets_a_header_and_a_section_per_benchmark() -> None:
    text = regenerate("", [outcome("reserve")], WHEN)
    assert text.startswith("# Benchmarks\n")
    assert find_marked(text, "header") is not None
    assert "## reserve" in text
    block = find_marked(text, "reserve")
    assert block is not None
    assert TABLE in block.group(1)
    assert "`.venv/bin/python bench/reserve.py` — 2026-11-22 10:00 UTC" in block.group(1)


def test_prose_outside_the_markers_survives_and_tables_are_replaced() -> None:
    first = regenerate("# Benchmarks\n\nIntro by hand.\n", [outcome("reserve")], WHEN)
    edited = first.replace("## reserve\n", "## reserve\n\nWhy the ratio is near 1: …\n")
    edited += "\nClosing words by hand.\n"
    new_table = TABLE.replace("| 1 | 2 |", "| 3 | 4 |")
    second = regenerate(edited, [outcome("reserve", new_table)], "2026-11-23 10:00 UTC")
    assert "Intro by hand." in second
    assert "Why the ratio is near 1: …" in second
    assert "Closing words by hand." in second
    assert "| 3 | 4 |" in second
    assert "| 1 | 2 |" not in second
    assert second.count(start_marker("reserve")) == second.count(end_marker("reserve")) == 1
    assert second.count(start_marker("header")) == 1
    assert "2026-11-23" in second


def test_a_hand_written_section_gets_markers_in_place_of_its_pasted_tables() -> None:
    doc = ("# Benchmarks\n\n## Reservation path (reserve)\n\nProse before.\n\n" + TABLE +
           "\n\nProse after.\n\n## issue\n\nOther section, `bench/issue.py`.\n")
    text = regenerate(doc, [outcome("reserve", TABLE.replace("| 1 | 2 |", "| 9 | 9 |"))],
                      WHEN)
    section = text.split("## Reservation path (reserve)")[1].split("## issue")[0]
    assert "Prose before." in section
    assert "Prose after." in section
    assert "| 9 | 9 |" in section
    assert "| 1 | 2 |" not in text
    assert section.index("Prose before.") < section.index(start_marker("reserve")) < \
        section.index("Prose after.")
    assert "Other section, `bench/issue.py`." in text
    assert "## reserve" not in text  # no second section


def test_a_section_that_runs_the_script_is_its_owner() -> None:
    doc = "# Benchmarks\n\n## End-to-end issuing\n\nRun `bench/issue.py` for this.\n"
    text = regenerate(doc, [outcome("issue")], WHEN)
    assert text.count("## ") == 1
    assert find_marked(text, "issue") is not None


def test_only_the_benchmarks_that_ran_change() -> None:
    both = regenerate("", [outcome("reserve"), outcome("mock", "**Mock**\n\n| m |\n|---|")],
                      WHEN)
    again = regenerate(both, [outcome("mock", "**Mock**\n\n| n |\n|---|")], WHEN)
    assert find_marked(again, "reserve").group(1) == find_marked(both, "reserve").group(1)  # type: ignore[union-attr]
    assert "| n |" in again


def test_a_failed_run_keeps_the_last_good_tables_under_a_note() -> None:
    good = regenerate("", [outcome("reserve")], WHEN)
    failed = regenerate(good, [outcome("reserve", "", code=1)], WHEN)
    block = find_marked(failed, "reserve").group(1)  # type: ignore[union-attr]
    assert block.startswith("**The last run failed**")
    assert "boom" in block
    assert TABLE in block
    twice = regenerate(failed, [outcome("reserve", "", code=1)], WHEN)
    block = find_marked(twice, "reserve").group(1)  # type: ignore[union-attr]
    assert block.count("**The last run failed**") == 1
    assert block.count(EARLIER) == 1
    assert TABLE in block
