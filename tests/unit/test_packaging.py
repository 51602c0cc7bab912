"""The distribution's layout, checked without building it (tests/acceptance/test_wheel.py builds
and installs a real wheel): pyproject.toml lists every package of the source tree, the wheel
carries every file of schema/ (the migrations and current/, the live schema), and ``gapless
migrate`` finds the migrations in the right place.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from gapless.errors import ConfigurationError
from gapless.ledger import migrations

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "setuptools"]
SKIPPED = {"__pycache__"}


def package_folder(package: str) -> Path:
    """Where setuptools takes ``package`` from (the longest package-dir mapping wins)."""
    mapped = SETUPTOOLS.get("package-dir", {})
    for prefix in sorted(mapped, key=len, reverse=True):
        if package == prefix or package.startswith(f"{prefix}."):
            rest = package[len(prefix):].lstrip(".").split(".")
            return ROOT / mapped[prefix] / Path(*[part for part in rest if part])
    return ROOT / Path(*package.split("."))


def source_packages() -> set[str]:
    """Every folder of gapless/ that is an import package (worker/ and recovery/ as the
    gapless.worker and gapless.recovery they are linked as)."""
    found = set()
    for top, package in (("gapless", "gapless"), ("worker", "gapless.worker"),
                         ("recovery", "gapless.recovery")):
        for init in (ROOT / top).rglob("__init__.py"):
            if SKIPPED.isdisjoint(init.parts):
                found.add(".".join((package, *init.parent.relative_to(ROOT / top).parts)))
    return found


def shipped(path: Path) -> bool:
    """True when the wheel carries ``path``: a module of a listed package, or package data."""
    data = SETUPTOOLS.get("package-data", {})
    for package in SETUPTOOLS["packages"]:
        folder = package_folder(package)
        if path.parent == folder and path.suffix == ".py":
            return True
        if path.is_relative_to(folder):
            relative = path.relative_to(folder).as_posix()
            if any(fnmatch.fnmatch(relative, pattern) for pattern in data.get(package, [])):
                return True
    return False


def test_every_source_package_is_listed() -> None:
    listed = set(SETUPTOOLS["packages"])
    missing = source_packages() - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    for package in listed:
        assert package_folder(package).is_dir(), f"{package}: no folder {package_folder(package)}"


def test_worker_and_recovery_are_linked_into_the_package_never_at_the_top() -> None:
    for name in ("worker", "recovery"):
        link = ROOT / "gapless" / name
        assert link.is_symlink(), f"gapless/{name} must be a link to ../{name}"
        assert link.readlink() == Path("..") / name, "a relative link, so any checkout works"
        assert link.resolve() == (ROOT / name).resolve()
    assert {package.split(".")[0] for package in SETUPTOOLS["packages"]} == {"gapless"}


def test_schema_is_shipped_inside_the_package_never_at_the_top() -> None:
    assert SETUPTOOLS["package-dir"] == {"gapless._schema": "schema"}
    assert "schema" not in {package.split(".")[0] for package in SETUPTOOLS["packages"]}
    assert not (ROOT / "schema" / "__init__.py").exists(), "schema/ must not be a package"


def test_every_file_of_schema_is_in_the_wheel() -> None:
    files = [path for path in (ROOT / "schema").rglob("*")
             if path.is_file() and SKIPPED.isdisjoint(path.parts) and path.suffix != ".pyc"]
    assert any(path.suffix == ".sql" for path in files)
    assert (ROOT / "schema" / "env.py") in files
    assert {ROOT / "schema" / "current" / name for name in migrations.CURRENT_FILES} <= set(files)
    assert ROOT / "schema" / "current" / "README.md" in files
    missing = [str(path.relative_to(ROOT)) for path in files if not shipped(path)]
    assert not missing, f"not in the wheel (see pyproject package-data): {missing}"


def test_every_file_of_the_packages_is_in_the_wheel() -> None:
    files = [path for top in ("gapless", "gapless/worker", "gapless/recovery")
             for path in (ROOT / top).rglob("*")
             if path.is_file() and SKIPPED.isdisjoint(path.parts) and path.suffix != ".pyc"]
    assert ROOT / "gapless" / "documents" / "unit_codes.txt" in files
    missing = [str(path.relative_to(ROOT)) for path in files if not shipped(path)]
    assert not missing, f"not in the wheel (see pyproject package-data): {missing}"


def test_migrations_come_from_the_package_before_the_checkout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAPLESS_SCHEMA_DIR", raising=False)
    packaged, checkout = tmp_path / "gapless" / "_schema", tmp_path / "schema"
    for folder in (packaged, checkout):
        (folder / "versions").mkdir(parents=True)
        (folder / "sql").mkdir()
        (folder / "env.py").write_text("", encoding="utf-8")
    monkeypatch.setattr(migrations, "PACKAGED_SCHEMA", packaged)
    monkeypatch.setattr(migrations, "CHECKOUT_SCHEMA", checkout)
    assert migrations.schema_dir() == packaged
    (packaged / "env.py").unlink()
    assert migrations.schema_dir() == checkout
    (checkout / "env.py").unlink()
    with pytest.raises(ConfigurationError, match="GAPLESS_SCHEMA_DIR"):
        migrations.schema_dir()


def test_this_checkout_finds_its_own_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GAPLESS_SCHEMA_DIR", raising=False)
    assert migrations.schema_dir() == ROOT / "schema"


def test_gapless_schema_dir_overrides_and_is_never_a_silent_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_SCHEMA_DIR", str(ROOT / "schema"))
    assert migrations.schema_dir() == ROOT / "schema"
    monkeypatch.setenv("GAPLESS_SCHEMA_DIR", str(tmp_path))
    with pytest.raises(ConfigurationError, match=f"GAPLESS_SCHEMA_DIR={tmp_path} holds no"):
        migrations.schema_dir()
