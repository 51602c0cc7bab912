"""Run every benchmark and regenerate docs/benchmarks.md (``make bench``).

    .venv/bin/python bench/run_all.py [--only reserve,issue] [--seconds S]
                                      [--args "issue=--window 4"] [--output PATH] [--dry-run]

Each ``bench/<name>.py`` (but this file, ``harness.py`` and ``__init__.py``) runs in turn, as a
subprocess with its default arguments, its output shown as it goes. What it prints from its
``machine:`` line on (its tables, Markdown already) is captured.

docs/benchmarks.md keeps hand-written prose: only the text between
``<!-- bench:<name>:start -->`` and ``<!-- bench:<name>:end -->`` is replaced, and the header
between ``<!-- bench:header:start/end -->``. A benchmark without markers yet gets them at the
end of its section (the ``## `` heading that names it or mentions ``bench/<name>.py``; hand-pasted
copies of its tables there are replaced), or a new section at the end. A benchmark that fails
keeps its previous tables, under a note saying the last run failed. ``--only`` runs some of them
and leaves every other section as it is.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import machine  # noqa: E402 - after the path is set up

BENCH_DIR = ROOT / "bench"
DEFAULT_OUTPUT = ROOT / "docs" / "benchmarks.md"
#: Not benchmarks: the shared code, this runner and the regression guard (``make bench-check``).
NOT_BENCHMARKS = {"harness", "run_all", "check", "__init__"}
#: The order they run in (cheap and independent first); others follow alphabetically.
PREFERRED_ORDER = ("reserve", "feed", "mock", "api", "issue", "recovery")
HEADER = "header"
#: Separates a failure note from the earlier run's tables it keeps.
EARLIER = "<!-- bench:earlier-run -->"
TITLE = "# Benchmarks"


@dataclass(frozen=True)
class Outcome:
    name: str
    command: str
    exit_code: int
    seconds: float
    captured: str        # the tables and context lines (Markdown)
    tail: str            # last lines of the output, for a failure note


# ---------------------------------------------------------------------------------- running


def discover(bench_dir: Path = BENCH_DIR) -> list[str]:
    names = {path.stem for path in bench_dir.glob("*.py")} - NOT_BENCHMARKS
    first = [name for name in PREFERRED_ORDER if name in names]
    return first + sorted(names - set(first))


def accepts(script: Path, flag: str) -> bool:
    """Does the script's argparse know ``flag``? (asks its --help; runs nothing else)"""
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60, check=False)
    return re.search(rf"(^|\s){re.escape(flag)}\b", result.stdout) is not None


def capture(output: str) -> str:
    """From the first ``machine:`` line (or the first table title) to the end, minus JSON
    lines (machine-readable copies of the tables) and trailing blank lines."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("machine:")), None)
    if start is None:
        start = next((i for i, line in enumerate(lines) if re.match(r"^\*\*.+\*\*$", line)),
                     len(lines))
    kept = []
    for line in lines[start:]:
        stripped = line.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                json.loads(stripped)
                continue
            except ValueError:
                pass
        if re.match(r"^\*\*.+\*\*$", line) and kept and kept[-1].strip():
            kept.append("")  # a table title starts its own Markdown paragraph
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def run_benchmark(name: str, extra: list[str], timeout: float) -> Outcome:
    script = BENCH_DIR / f"{name}.py"
    argv = [sys.executable, str(script), *extra]
    command = " ".join([".venv/bin/python", f"bench/{name}.py", *map(shlex.quote, extra)])
    print(f"\n=== {command}", flush=True)
    started = time.monotonic()
    lines: list[str] = []
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
            if time.monotonic() - started > timeout:
                proc.kill()
                lines.append(f"(killed after {timeout:g} s)\n")
                break
        code = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    finally:
        proc.stdout.close()
    output = "".join(lines)
    return Outcome(name, command, code, time.monotonic() - started, capture(output),
                   "\n".join(output.splitlines()[-8:]))


# ---------------------------------------------------------------------------------- the document


def start_marker(name: str) -> str:
    return f"<!-- bench:{name}:start -->"


def end_marker(name: str) -> str:
    return f"<!-- bench:{name}:end -->"


def marked_block(name: str, body: str) -> str:
    return f"{start_marker(name)}\n{body.strip()}\n{end_marker(name)}"


def find_marked(text: str, name: str) -> re.Match[str] | None:
    return re.search(re.escape(start_marker(name)) + r"\n?(.*?)\n?" + re.escape(end_marker(name)),
                     text, flags=re.DOTALL)


def section_body(outcome: Outcome, when: str, previous: str | None) -> str:
    if outcome.exit_code == 0:
        return (f"`{outcome.command}` — {when}, {outcome.seconds:.0f} s\n\n"
                f"{outcome.captured}")
    note = (f"**The last run failed** (`{outcome.command}`, {when}: exit code "
            f"{outcome.exit_code}).")
    tail = "\n".join(f"    {line}" for line in outcome.tail.splitlines())
    if previous and EARLIER in previous:  # failed before too: keep the last good tables only
        previous = previous.split(EARLIER, 1)[1]
    if previous and previous.strip():
        return (f"{note} The tables below are from an earlier run.\n\n{tail}\n\n{EARLIER}\n"
                f"{previous.strip()}")
    return f"{note}\n\n{tail}"


def table_titles(markdown: str) -> list[str]:
    return re.findall(r"^\*\*(.+)\*\*$", markdown, flags=re.MULTILINE)


def _sections(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line ranges of each ``## `` section (heading included)."""
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    return [(start, starts[n + 1] if n + 1 < len(starts) else len(lines))
            for n, start in enumerate(starts)]


def _owner_section(lines: list[str], name: str) -> tuple[int, int] | None:
    """The section about benchmark ``name``: its heading names it, or its text runs it."""
    word = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
    sections = _sections(lines)
    for first, end in sections:
        if word.search(lines[first]):
            return first, end
    for first, end in sections:
        if any(f"bench/{name}.py" in line for line in lines[first:end]):
            return first, end
    return None


def _remove_pasted_tables(lines: list[str], first: int, end: int, titles: list[str]
                          ) -> tuple[list[str], int | None]:
    """Drop hand-pasted copies of the given tables (title line, blank, ``|`` rows) from a
    section; returns the section's new lines and where the first one was."""
    section = lines[first:end]
    out: list[str] = []
    position = None
    i = 0
    while i < len(section):
        match = re.match(r"^\*\*(.+)\*\*$", section[i])
        if match and match.group(1) in titles:
            j = i + 1
            while j < len(section) and not section[j].strip():
                j += 1
            if j < len(section) and section[j].startswith("|"):
                while j < len(section) and section[j].startswith("|"):
                    j += 1
                if position is None:
                    position = len(out)
                while j < len(section) and not section[j].strip():
                    j += 1
                i = j
                continue
        out.append(section[i])
        i += 1
    return out, position


def place(text: str, name: str, body: str) -> str:
    """``text`` with benchmark ``name``'s generated block set to ``body`` (see the module doc)."""
    block = marked_block(name, body)
    existing = find_marked(text, name)
    if existing is not None:
        return text[:existing.start()] + block + text[existing.end():]
    lines = text.splitlines()
    owner = _owner_section(lines, name)
    if owner is None:
        return text.rstrip("\n") + f"\n\n## {name}\n\n{block}\n"
    first, end = owner
    section, position = _remove_pasted_tables(lines, first, end, table_titles(body))
    if position is None:
        while len(section) > 1 and not section[-1].strip():
            section.pop()
        section += ["", *block.splitlines(), ""]
    else:
        section[position:position] = [*block.splitlines(), ""]
    return "\n".join(lines[:first] + section + lines[end:]).rstrip("\n") + "\n"


def header_body(when: str) -> str:
    return (f"Regenerated by `make bench` (`.venv/bin/python bench/run_all.py`) on {when}; "
            "each section names its own command and date.  \n"
            f"Machine: {machine()}.  \n"
            "Every script compares gapless with a baseline measured in the same run; numbers "
            "from one machine are comparable with each other, not with another machine's.")


def regenerate(text: str, outcomes: list[Outcome], when: str) -> str:
    """The document with the header and every run benchmark's block replaced; prose kept."""
    if not text.strip():
        text = f"{TITLE}\n"
    header = marked_block(HEADER, header_body(when))
    existing = find_marked(text, HEADER)
    if existing is not None:
        text = text[:existing.start()] + header + text[existing.end():]
    else:
        lines = text.splitlines()
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0)
        if at == 0:
            lines[0:0] = [TITLE, ""]
            at = 1
        lines[at:at] = ["", *header.splitlines(), ""]
        text = "\n".join(lines).rstrip("\n") + "\n"
    for outcome in outcomes:
        previous = find_marked(text, outcome.name)
        text = place(text, outcome.name,
                     section_body(outcome, when, previous.group(1) if previous else None))
    return re.sub(r"\n{3,}", "\n\n", text)


# ---------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="",
                        help="Comma-separated benchmark names (default: all of bench/*.py).")
    parser.add_argument("--seconds", type=float, default=None,
                        help="Pass --seconds S to every benchmark that accepts it (quick runs).")
    parser.add_argument("--args", action="append", default=[], metavar="NAME=ARGS",
                        help='Extra arguments for one benchmark, e.g. "issue=--window 4".')
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="Seconds one benchmark may run before it is killed.")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--dry-run", action="store_true",
                        help="Print the regenerated document instead of writing it.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    available = discover()
    names = [name.strip() for name in args.only.split(",") if name.strip()] or available
    unknown = sorted(set(names) - set(available))
    if unknown:
        print(f"run_all: no such benchmark: {', '.join(unknown)} "
              f"(have: {', '.join(available)})", file=sys.stderr)
        return 2
    extra: dict[str, list[str]] = {}
    for item in args.args:
        name, sep, rest = item.partition("=")
        if not sep or name not in available:
            print(f"run_all: --args wants NAME=ARGS with a known NAME, got {item!r}",
                  file=sys.stderr)
            return 2
        extra.setdefault(name, []).extend(shlex.split(rest))
    outcomes = []
    for name in names:
        script_args = list(extra.get(name, []))
        if args.seconds is not None and accepts(BENCH_DIR / f"{name}.py", "--seconds"):
            script_args = ["--seconds", f"{args.seconds:g}", *script_args]
        outcomes.append(run_benchmark(name, script_args, args.timeout))
    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    document = regenerate(current, outcomes, when)
    if args.dry_run:
        print(document)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(document, encoding="utf-8")
        print(f"\nrun_all: wrote {args.output}", file=sys.stderr)
    failed = [outcome.name for outcome in outcomes if outcome.exit_code != 0]
    for outcome in outcomes:
        status = "ok" if outcome.exit_code == 0 else f"FAILED (exit {outcome.exit_code})"
        print(f"run_all: {outcome.name}: {status} in {outcome.seconds:.0f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
