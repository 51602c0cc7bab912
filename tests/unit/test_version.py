"""``gapless --version``: the installed distribution's version, from its metadata."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

from tests.helpers import ROOT, run_gapless

ENV = {"PATH": "/usr/bin:/bin"}


def test_version_is_the_installed_distributions() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    result = run_gapless(["--version"], ENV, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"gapless {version('gapless')}\n"
    assert version("gapless") == project["version"]
    assert result.stderr == ""
