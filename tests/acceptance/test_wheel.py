"""gapless as a released package: build the wheel from the repository, install it into a fresh
virtualenv, and run it from another directory with no source tree and no GAPLESS_SCHEMA_DIR.

The wheel is built from a copy of the working tree (so nothing is written into the checkout
and no stale ``build/`` can leak into it) by ``pip wheel --no-deps`` — the build backend comes
from pip's cache. The wheel itself is installed with ``--no-deps``; its third-party
dependencies are borrowed from this test's own environment through a ``.pth`` file written
after the install (as tests/acceptance/test_readme.py does), so nothing is downloaded and the
``gapless`` that runs is the wheel's alone. About 5 s on the development machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import uuid
import zipfile
from pathlib import Path

import psycopg
import pytest

from gapless.ledger.migrations import CURRENT_FILES, head_revision
from tests.conftest import database_url, drop_database
from tests.helpers import ROOT, run_ok

#: Not part of a build: version control, local environments, caches, earlier build output.
IGNORED = (".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache",
           ".ruff_cache", ".hypothesis", "build", "dist", "*.egg-info", "results", ".logs")


def run(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 180
        ) -> subprocess.CompletedProcess[str]:
    return run_ok(argv, cwd=cwd, env=env, timeout=timeout)


def clean_env() -> dict[str, str]:
    """This environment without gapless settings, virtualenv or Python path variables."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith(("GAPLESS_", "PYTHON", "VIRTUAL_ENV"))}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "gapless"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*IGNORED))
    out = tmp_path_factory.mktemp("wheelhouse")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out),
         str(source)], cwd=out, env=clean_env())
    (built,) = out.glob("gapless-*.whl")
    return built


def test_the_wheel_carries_every_module_and_the_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in ROOT.joinpath("schema").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            relative = path.relative_to(ROOT / "schema").as_posix()
            assert f"gapless/_schema/{relative}" in names, relative
    assert not any(name.startswith("schema/") for name in names), "schema/ at the top level"
    assert "gapless/_schema/current/numbering.sql" in names  # the live schema, with the seal
    for top in ("gapless", "gapless/worker", "gapless/recovery"):
        for path in ROOT.joinpath(top).rglob("*"):  # modules and data (py.typed, code lists)
            if path.is_file() and "__pycache__" not in path.parts:
                assert f"{top}/{path.relative_to(ROOT / top).as_posix()}" in names, path
    assert not any(name.startswith(("worker/", "recovery/")) for name in names), names
    assert "gapless/py.typed" in names
    assert "gapless/documents/unit_codes.txt" in names
    metadata = next(name for name in names if name.endswith(".dist-info/top_level.txt"))
    assert set(zipfile.ZipFile(wheel).read(metadata).decode().split()) == {"gapless"}


def test_the_installed_wheel_migrates_a_fresh_database_from_anywhere(
        wheel: Path, tmp_path: Path) -> None:
    env = clean_env()
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    run([base_python, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-compile", str(wheel)], cwd=tmp_path, env=env)
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=tmp_path, env=env).stdout.strip()
    # Written after the install, so pip never saw this checkout's own (editable) gapless; a
    # .pth line adds the directory only, its own .pth files are not processed.
    Path(site, "_borrowed_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n", encoding="utf-8")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    gapless = str(venv / "bin" / "gapless")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["version"]
    assert run([gapless, "--version"], cwd=elsewhere, env=env).stdout == f"gapless {version}\n"
    where = run([str(python), "-c", "import gapless, gapless.ledger.migrations as m; "
                 "print(gapless.__file__); print(m.schema_dir())"],
                cwd=elsewhere, env=env).stdout.split()
    assert [Path(path).is_relative_to(venv) for path in where] == [True, True], where
    assert Path(where[1]).name == "_schema"
    # The live schema travels too, every file build_from_current applies.
    current = run([str(python), "-c", "import gapless.ledger.migrations as m; "
                   "print(*m.current_files(), sep='\\n')"],
                  cwd=elsewhere, env=env).stdout.split()
    assert current == [str(Path(where[1], "current", name)) for name in CURRENT_FILES], current
    # The only top-level import name is gapless: the worker and recovery live inside it.
    run([str(python), "-c", "import gapless.worker.consumer, gapless.recovery.loop"],
        cwd=elsewhere, env=env)
    for name in ("worker", "recovery", "schema"):
        absent = subprocess.run([str(python), "-c", f"import {name}"], cwd=elsewhere, env=env,
                                capture_output=True, text=True, timeout=60, check=False)
        assert absent.returncode != 0, name
        assert "ModuleNotFoundError" in absent.stderr, absent.stderr

    name = f"gapless_wheel_{uuid.uuid4().hex[:8]}"
    db_env = {**env, "GAPLESS_DATABASE_URL": database_url(name)}
    try:
        first = run([gapless, "migrate"], cwd=elsewhere, env=db_env)
        assert "created database" in first.stdout, first.stdout
        with psycopg.connect(database_url(name)) as conn:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        assert row is not None
        assert row[0] == head_revision(database_url(name))
        assert "nothing to do" in run([gapless, "migrate"], cwd=elsewhere, env=db_env).stdout
        # The installed doctor reads the head from the installed migrations too.
        doctor = subprocess.run([gapless, "doctor", "--json", "--timeout", "30"], cwd=elsewhere,
                                env=db_env, capture_output=True, text=True, timeout=60,
                                check=False)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert checks["schema"]["status"] == "ok", checks
    finally:
        drop_database(name)
