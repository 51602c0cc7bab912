"""bench/ stands on gapless and its own harness (bench/harness.py), never on the tests: no module
of bench/ imports ``tests`` or anything under it, at the top or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def imported_modules(source: str) -> set[str]:
    """Every module an ``import``/``from … import`` names, anywhere in ``source`` (relative
    imports as ``.name``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def is_tests(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")


def test_no_bench_module_imports_tests() -> None:
    scripts = sorted(BENCH.glob("*.py"))
    assert any(path.name == "harness.py" for path in scripts)
    offenders = {path.name: sorted(filter(is_tests, imported_modules(path.read_text())))
                 for path in scripts}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_scan_sees_lazy_imports() -> None:
    source = "def f():\n    from tests.helpers import free_port\n    import tests.ubl\n"
    assert {"tests.helpers", "tests.ubl"} <= imported_modules(source)
    assert not is_tests("testsuite")
