"""The CLI prints only through :mod:`gapless.cli.printable` (STYLE 19): read from the sources of
``gapless/cli``, so a new command cannot print a value from outside as markup or terminal
control. And what those helpers print: text, valid JSON, never an escape byte."""

from __future__ import annotations

import ast
import io
import json
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from rich.table import Table

from gapless.cli.printable import console, echo, echo_json, json_text, printable

CLI = Path(__file__).resolve().parents[2] / "gapless" / "cli"

#: Modules that still print by other means, and what they must change to leave this list.
NOT_YET = {
    "demo.py": "gapless.demo.runner styles its own lines with markup on the consoles it is "
               "given; what it shows of data is the audit's, run as `gapless audit`",
}
#: Writes of bytes that are the output itself, byte for byte: (module, how many).
RAW_BYTES = {("invoice.py", 2)}  # invoice show --document: the bytes, a final newline

#: Calls that print around printable: ``print(...)``, ``typer.echo``, ``click.echo``,
#: ``sys.stdout.write``, ``rich.print``, ``console.print_json``, ``Console(...)``,
#: ``Text.from_markup`` / ``from_ansi``.
_PRINTING_NAMES = {"print", "Console", "echo", "secho", "rprint"}
_PRINTING_ATTRIBUTES = {"echo", "secho", "print_json", "from_markup", "from_ansi", "Console"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(CLI.glob("*.py")):
        if path.name == "printable.py" or path.name in NOT_YET:
            continue
        yield path.name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _bypasses(name: str, tree: ast.Module) -> Iterator[str]:
    imported_echo = {alias.asname or alias.name for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module == "gapless.cli.printable"
                     for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("rich", "click", "typer"):
            for alias in node.names:
                if alias.name in ("print", "echo", "secho"):
                    yield f"{name}:{node.lineno}: from {node.module} import {alias.name}"
        if not isinstance(node, ast.Call):
            continue
        called = _dotted(node.func)
        where = f"{name}:{node.lineno}: {called}(...)"
        if isinstance(node.func, ast.Name):
            if node.func.id in _PRINTING_NAMES and node.func.id not in imported_echo:
                yield where
            if node.func.id == "Text" and not all(
                    isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                    for arg in node.args):
                yield f"{where}: a Text of a value (printable.plain)"
        elif isinstance(node.func, ast.Attribute):
            if node.func.attr in _PRINTING_ATTRIBUTES:
                yield where
            if called.startswith(("sys.stdout", "sys.stderr")) and node.func.attr in (
                    "write", "writelines"):
                yield where


def test_every_command_prints_through_printable() -> None:
    bypasses = [found for name, tree in _modules() for found in _bypasses(name, tree)]
    raw: dict[str, int] = {}
    for found in bypasses:
        if found.endswith(": sys.stdout.buffer.write(...)"):
            name = found.split(":", 1)[0]
            raw[name] = raw.get(name, 0) + 1
    assert [found for found in bypasses if "sys.stdout.buffer.write" not in found] == []
    assert set(raw.items()) == RAW_BYTES


def test_the_source_check_finds_a_command_that_prints_data_by_itself() -> None:
    tree = ast.parse("import typer\nfrom rich.console import Console\n"
                     "def show(x):\n    Console().print(f'[b]{x}')\n    typer.echo(x)\n"
                     "    print(x)\n    Text(x)\n")
    assert sorted(line.split(": ", 1)[1] for line in _bypasses("new.py", tree)) == [
        "Console(...)", "Text(...): a Text of a value (printable.plain)", "print(...)",
        "typer.echo(...)"]


HOSTILE = "x[/]y[bold] \x1b[31m [link=http://e.x]click[/link] \u202e\x9b\u2028\ud800 ş"


def _unsafe(text: str) -> list[str]:
    return [c for c in text if printable(c) != c and c not in "\n"]


def test_a_table_and_a_line_of_hostile_data_print_as_text() -> None:
    out = io.StringIO()
    shown = console(width=400)
    shown.file = out
    table = Table(title=f"invoice {HOSTILE}")
    table.add_column("value")
    table.add_row(HOSTILE)
    shown.print(table)
    shown.print(f"line {HOSTILE}")
    text = out.getvalue()
    assert _unsafe(text) == []
    assert text.count(printable(HOSTILE)) == 2  # the cell and the line; the title wraps
    assert "invoice x[/]y[bold] \\x1b[31m" in text
    assert "[link=http://e.x]click[/link]" in text


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_json_stays_valid_and_escapes_what_printable_escapes(ensure_ascii: bool) -> None:
    data = {"id": HOSTILE, "n": [1, {"x": "\x00\x7f"}]}
    text = json_text(data, indent=2, ensure_ascii=ensure_ascii)
    assert _unsafe(text) == []
    assert json.loads(text) == data
    assert ("ş" in text) is not ensure_ascii


def test_echo_prints_one_line_of_text() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        echo(f"invoice {HOSTILE}\nsecond")
        echo_json({"id": HOSTILE})
    first, second = out.getvalue().splitlines()
    assert first == f"invoice {printable(HOSTILE)}\\x0asecond"
    assert json.loads(second) == {"id": HOSTILE}
