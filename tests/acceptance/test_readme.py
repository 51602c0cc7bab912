"""The README's commands, run as a newcomer would: in a fresh clone, in order.

The shell blocks of README.md are parsed (so the README cannot drift from what works):
"## Run it" must install and run ``gapless demo``; "## Run the tests" must install and name the
test command. Every ``gapless`` command anywhere in the README's shell blocks must parse against
the real command tree, and every ``make`` target it names must exist. The README stays a
newcomer's page: at most 300 lines, every relative link pointing at a file of the repository (and
an anchor at a heading of it), its prerequisites and licence agreeing with pyproject.toml, and
each figure of its capacity summary found in docs/benchmarks.md.

The fresh-clone test clones the repository's committed HEAD, installs it as ``make install``
does (a ``.venv`` in the clone and ``pip install -e .``; the third-party packages are borrowed
from this test's own environment through a ``.pth`` file, so nothing but the build backend is
downloaded), migrates a fresh database, runs the README's demo command small, and checks that
the README's test command resolves and collects tests in the clone.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.conftest import admin_conninfo, database_url
from tests.helpers import ROOT, run_ok
from tests.unit.test_compose import parse_command

README = ROOT / "README.md"
MAKEFILE = ROOT / "Makefile"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
PYPROJECT = ROOT / "pyproject.toml"
MAX_README_LINES = 300
SHELL_LANGUAGES = {"sh", "shell", "bash", "console"}
GAPLESS_PROGRAMS = {"gapless", ".venv/bin/gapless"}


@dataclass(frozen=True)
class Command:
    section: str
    argv: list[str]

    @property
    def is_gapless(self) -> bool:
        return bool(self.argv) and self.argv[0] in GAPLESS_PROGRAMS


def readme_commands(text: str) -> list[Command]:
    """Every command line of every fenced shell block, with the ``## `` section it is in (a line
    ending in a backslash continues on the next)."""
    commands = []
    section = ""
    fence: str | None = None
    pending = ""
    for raw in text.splitlines():
        if fence in SHELL_LANGUAGES and raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        line, pending = pending + raw, ""
        if fence is None:
            if line.startswith("## "):
                section = line[3:].strip()
            match = re.match(r"^```(\w*)\s*$", line)
            if match:
                fence = match.group(1).lower()
            continue
        if line.startswith("```"):
            fence = None
            continue
        if fence not in SHELL_LANGUAGES:
            continue
        argv = shlex.split(line, comments=True)
        if fence == "console" and argv[:1] == ["$"]:
            argv = argv[1:]
        if argv and argv[-1] == "&":  # started in the background: the command is the same
            argv = argv[:-1]
        if argv:
            commands.append(Command(section, argv))
    return commands


def in_section(commands: list[Command], section: str) -> list[Command]:
    found = [command for command in commands if command.section == section]
    assert found, f"README has no shell block under '## {section}'"
    return found


def make_targets(makefile: Path) -> dict[str, list[str]]:
    """Target name -> recipe lines of a Makefile (simple rules only, which is all it has)."""
    targets: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in makefile.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", line)
        if match and not line.startswith("\t"):
            current = targets.setdefault(match.group(1), [])
        elif line.startswith("\t") and current is not None:
            current.append(line.strip())
        elif not line.strip() or line.startswith("#"):
            continue
        else:
            current = None
    return targets


# ------------------------------------------------------------------------------ static checks


def test_run_it_installs_and_runs_the_demo() -> None:
    commands = in_section(readme_commands(README.read_text(encoding="utf-8")), "Run it")
    assert commands[0].argv == ["make", "install"]
    demo = [command for command in commands if command.is_gapless
            and command.argv[1:2] == ["demo"]]
    assert demo, "'## Run it' must run gapless demo"


def test_run_the_tests_names_the_test_command() -> None:
    commands = in_section(readme_commands(README.read_text(encoding="utf-8")),
                          "Run the tests")
    assert ["make", "install"] in [command.argv for command in commands]
    assert ["make", "test"] in [command.argv for command in commands]


def test_every_gapless_command_in_the_readme_parses() -> None:
    commands = [c for c in readme_commands(README.read_text(encoding="utf-8")) if c.is_gapless]
    assert commands
    for command in commands:
        parse_command(command.argv[1:])  # raises on an unknown command, flag or bad value


def test_every_make_target_in_the_readme_exists() -> None:
    targets = make_targets(MAKEFILE)
    named = {argv[1] for argv in (c.argv for c in readme_commands(
        README.read_text(encoding="utf-8"))) if argv[0] == "make" and len(argv) > 1}
    assert {"install", "test"} <= named
    for target in named:
        assert target in targets, f"README runs `make {target}`; the Makefile has no such target"
    assert any("pytest" in line for line in targets["test"])
    assert any("pip install" in line and "-e" in line for line in targets["install"])


def test_the_readme_parser_sees_what_it_should() -> None:
    text = "\n".join([
        "## Run it", "```sh", "make install   # first", ".venv/bin/gapless demo", "```",
        "```text", "gapless not-a-command", "```",
        "## Other", "```console", "$ gapless worker --concurrency 2 &", "```"])
    assert readme_commands(text) == [
        Command("Run it", ["make", "install"]), Command("Run it", [".venv/bin/gapless", "demo"]),
        Command("Other", ["gapless", "worker", "--concurrency", "2"])]


def markdown_links(text: str) -> list[str]:
    """The target of every inline link ``[text](target)`` outside code spans and fenced blocks."""
    prose = re.sub(r"(?ms)^```.*?^```", "", text)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def heading_anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives the headings of ``text`` (GitHub's rule: lower
    case, punctuation dropped, spaces to hyphens)."""
    headings = re.findall(r"^#{1,6} +(.+?) *$", re.sub(r"(?ms)^```.*?^```", "", text),
                          re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of ``text``."""
    match = re.search(rf"(?ms)^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def test_the_readme_is_a_newcomers_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines; at most {MAX_README_LINES} (reference goes in docs/)")


def resolves(link: str) -> bool:
    """Whether a link relative to the README names an existing file or folder (and, for an
    anchor into a Markdown file, one of its headings)."""
    path, _, anchor = link.partition("#")
    target = (README.parent / path) if path else README
    if not target.exists():
        return False
    if anchor and target.suffix == ".md":
        return anchor in heading_anchors(target.read_text(encoding="utf-8"))
    return True


def test_every_relative_link_of_the_readme_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    links = [link for link in markdown_links(text)
             if not re.match(r"^[a-z][a-z0-9+.-]*:", link, re.IGNORECASE)]
    assert links
    missing = [link for link in links if not resolves(link)]
    assert not missing, (
        f"README links to what the repository does not hold: {list(dict.fromkeys(missing))}")


def test_the_link_checks_see_what_they_should() -> None:
    text = "\n".join([
        "See [a](docs/a.md), [b](docs/b.md#why-it-is), [site](https://example.com) and",
        "`[not](a-link.md)`.", "```md", "[nor](this.md)", "```", "## Why, it is!"])
    assert markdown_links(text) == ["docs/a.md", "docs/b.md#why-it-is", "https://example.com"]
    assert heading_anchors(text) == {"why-it-is"}


def test_the_prerequisites_and_licence_agree_with_pyproject() -> None:
    text = README.read_text(encoding="utf-8")
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    python = project["requires-python"].removeprefix(">=")
    assert re.search(rf"^\| Python \| ≥ {re.escape(python)} \|",
                     section(text, "Prerequisites"), re.MULTILINE)
    licence = project["license"]
    assert licence in section(text, "Licence")
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith(f"{licence} License")


def test_the_capacity_figures_are_measured_ones() -> None:
    capacity = section(README.read_text(encoding="utf-8"), "Capacity")
    benchmarks = BENCHMARKS.read_text(encoding="utf-8")
    assert "bench/issue.py" in capacity  # the command that measures them
    figures = {figure for figure in re.findall(r"\d+(?:\.\d+)?", capacity)
               if "." in figure or len(figure) >= 3}
    assert figures
    unmeasured = sorted(figure for figure in figures
                        if not re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", benchmarks))
    assert not unmeasured, f"capacity figures not in docs/benchmarks.md: {unmeasured}"


# ------------------------------------------------------------------------------ fresh clone


def run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 240
        ) -> subprocess.CompletedProcess[str]:
    return run_ok(argv, cwd=cwd, env=env, timeout=timeout)


def install_like_make_install(clone: Path, env: dict[str, str]) -> Path:
    """``make install`` in the clone, borrowing installed third-party packages from this venv."""
    base_python = getattr(sys, "_base_executable", sys.executable)
    run([base_python, "-m", "venv", ".venv"], cwd=clone, env=env)
    venv_python = clone / ".venv" / "bin" / "python"
    site = run([str(venv_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=clone, env=env).stdout.strip()
    # A .pth line adds the directory only; the .pth files in it (this checkout's own editable
    # install) are not processed, so `gapless` is imported from the clone alone.
    Path(site, "_borrowed_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    run([str(venv_python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", "."],
        cwd=clone, env=env, timeout=280)
    return clone / ".venv" / "bin" / "gapless"


def drop(name: str) -> None:
    with psycopg.connect(admin_conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.mark.slow
def test_the_readme_works_in_a_fresh_clone(tmp_path: Path) -> None:
    commands = readme_commands(README.read_text(encoding="utf-8"))
    run_it = in_section(commands, "Run it")
    run_tests = in_section(commands, "Run the tests")
    clone = tmp_path / "clone"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GAPLESS_", "PYTHON", "VIRTUAL_ENV"))}
    env["COLUMNS"] = "80"
    run(["git", "clone", "--quiet", str(ROOT), str(clone)], cwd=tmp_path, env=env)

    # make install
    assert run_it[0].argv == ["make", "install"]
    gapless = install_like_make_install(clone, env)
    assert run([str(gapless), "--help"], cwd=clone, env=env).stdout
    imported = run([str(clone / ".venv" / "bin" / "python"), "-c",
                    "import gapless; print(gapless.__file__)"], cwd=tmp_path, env=env)
    assert imported.stdout.strip().startswith(str(clone))

    # gapless migrate, against a fresh database (twice: it is idempotent)
    name = f"gapless_readme_{uuid.uuid4().hex[:8]}"
    db_env = {**env, "GAPLESS_DATABASE_URL": database_url(name)}
    if "GAPLESS_AMQP_URL" in os.environ:
        db_env["GAPLESS_AMQP_URL"] = os.environ["GAPLESS_AMQP_URL"]
    try:
        assert "created database" in run([str(gapless), "migrate"], cwd=clone,
                                         env=db_env).stdout
        assert "nothing to do" in run([str(gapless), "migrate"], cwd=clone, env=db_env).stdout
    finally:
        drop(name)

    # the README's demo command, small, in its own demo database
    demo = next(c for c in run_it if c.is_gapless and c.argv[1:2] == ["demo"])
    demo_db = f"gapless_demo_readme_{uuid.uuid4().hex[:8]}"
    program = str(clone / demo.argv[0]) if "/" in demo.argv[0] else str(gapless)
    result = run([program, *demo.argv[1:], "--invoices", "100", "--database", demo_db,
                  "--log-dir", str(tmp_path / "demo-logs")], cwd=clone, env=db_env, timeout=280)
    assert re.search(r"^audit: clean$", result.stdout, re.MULTILINE), result.stdout
    assert "demo: 100/100 invoices settled" in result.stdout

    # the test command exists in the clone, resolves, and collects tests
    assert ["make", "test"] in [c.argv for c in run_tests]
    # Under an outer make (CI runs `make test`) a nested make announces its directory, whose
    # path may itself contain "pytest": ask for no such lines and skip any that remain.
    recipe = run(["make", "--no-print-directory", "-n", "test"], cwd=clone,
                 env=env).stdout.strip().splitlines()
    pytest_line = next(line for line in recipe
                       if "pytest" in line and not line.startswith("make"))
    collected = run([*shlex.split(pytest_line), "--collect-only", "-q", "-p",
                     "no:cacheprovider", "tests/unit"], cwd=clone, env=env)
    assert re.search(r"\d+ tests? collected", collected.stdout), collected.stdout
