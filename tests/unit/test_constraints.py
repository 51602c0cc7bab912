"""constraints.txt, the pinned versions CI, the benchmarks and the image install: one exact pin
per package, every requirement of pyproject.toml pinned at a version its range allows, and every
install path (``make install``, .ci/run, the Dockerfile) installing with it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)$")


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for number, line in enumerate(CONSTRAINTS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"constraints.txt:{number}: not an exact pin: {line!r}"
        name = canonicalize_name(match["name"])
        assert name not in found, f"constraints.txt:{number}: {name} pinned twice"
        found[name] = Version(match["version"])
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    # A marker is evaluated for this interpreter and platform (uvloop: not on Windows).
    return [requirement for requirement in map(Requirement, lines)
            if requirement.marker is None or requirement.marker.evaluate()]


def test_every_requirement_is_pinned_within_its_range() -> None:
    pinned = pins()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement} is not pinned in constraints.txt (make lock)"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside pyproject.toml's "
            f"{requirement} (make lock)")


def test_the_project_itself_is_not_pinned() -> None:
    assert "gapless" not in pins()


def test_every_install_path_uses_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    install = makefile.split("\ninstall:\n", 1)[1].split("\n\n", 1)[0]
    assert '-c constraints.txt -e ".[dev]"' in install
    assert '-c constraints.txt -e ".[dev]"' in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^COPY .*\bconstraints\.txt\b.* /tmp/src/$", dockerfile, re.M)
    assert "pip install -c /tmp/src/constraints.txt /tmp/src" in dockerfile
