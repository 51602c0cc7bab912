"""Command-line usage errors: one line on stderr and exit 2."""

from __future__ import annotations

import pytest

from tests.helpers import run_gapless

ENV = {"PATH": "/usr/bin:/bin", "GAPLESS_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}


@pytest.mark.parametrize("args", [
    ["no-such-command"],
    ["migrate", "--cluster-id", "40000"],
    ["migrate", "--cluster-id", "x"],
    ["series", "add", "acme", "ABC", "--reset", "weekly"],
    ["series", "add", "acme", "ABC", "--prefix", "abc"],
    ["series", "add", "acme", "ABC", "--width", "40"],
    ["series", "add", "acme", "ABC", "--tz", "Nowhere/City"],
    ["id", "decode", "banana"],
    ["id", "encode", "40000", "1"],
])
def test_bad_arguments_get_one_line_and_exit_2(args: list[str]) -> None:
    result = run_gapless(args, ENV, timeout=30)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gapless: error")


def test_id_decode_prints_cluster_and_local() -> None:
    result = run_gapless(["id", "decode", str((7 << 48) | 1234)], ENV, timeout=30)
    assert result.returncode == 0
    assert result.stdout.strip() == f"id {(7 << 48) | 1234}: cluster 7, local 1234"


def test_unreachable_database_is_one_line_exit_1() -> None:
    result = run_gapless(["series", "list"], ENV, timeout=60)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
