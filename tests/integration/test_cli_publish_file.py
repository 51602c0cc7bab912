"""``gapless publish --file`` given something that is not JSON Lines — a JSON array, one object
pretty-printed over several lines — says so in one line and exits 2, before anything is
published (real RabbitMQ: the queues stay empty). A JSON Lines file with a broken line is still
published line by line."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gapless.amqp.management import queue_depths
from gapless.settings import Settings
from tests.helpers import run_gapless, today

HINT = "give one JSON object per line (JSONL)"


def invoice(invoice_id: str) -> dict[str, Any]:
    return {"invoice_id": invoice_id, "tenant": "acme", "series": "ABC", "priority": "batch",
            "issue_date": today(), "currency": "TRY",
            "customer": {"tax_id": "1234567890", "name": "Example Ltd"},
            "lines": [{"description": "Widget", "quantity": "2", "unit_price": "10.00",
                       "vat_rate": "20"}]}


@pytest.fixture
def amqp_settings(queue_prefix: str) -> Settings:
    return Settings(queue=queue_prefix)


@pytest.fixture
def amqp_env(amqp_settings: Settings) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    env.update({"GAPLESS_AMQP_URL": amqp_settings.amqp_url,
                "GAPLESS_QUEUE": amqp_settings.queue})
    return env


def refused_whole(result: Any, line: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    [error] = result.stderr.strip().splitlines()
    assert error.startswith("gapless: error (gapless publish): ")
    assert error.endswith(line), error


@pytest.mark.parametrize(("content", "problem"), [
    # The usual mistake: the array a JSON tool writes, pretty-printed.
    (json.dumps([invoice("a-1"), invoice("a-2"), invoice("a-3")], indent=2),
     "line 1: a JSON array"),
    # An array on one line.
    (json.dumps([invoice("a-1"), invoice("a-2")]), "line 1: a JSON array"),
    # One object, pretty-printed; blank lines first.
    ("\n\n" + json.dumps(invoice("p-1"), indent=2), "line 3: a JSON object over several lines"),
    # Pretty-printed with its opening brace on its own line and a byte order mark.
    ("\ufeff{\n" + json.dumps(invoice("p-1"), indent=4)[1:], "line 1: a JSON object over "
                                                             "several lines"),
])
async def test_a_file_that_is_not_json_lines_is_refused_whole(
        amqp_settings: Settings, amqp_env: dict[str, str], tmp_path: Path, content: str,
        problem: str) -> None:
    path = tmp_path / "invoices.json"
    path.write_text(content + "\n", encoding="utf-8")
    result = await asyncio.to_thread(run_gapless, ["publish", "--file", str(path)], amqp_env)
    refused_whole(result, f"{path}: {problem}; {HINT}")
    assert set((await queue_depths(amqp_settings)).values()) == {0}  # nothing published


async def test_a_json_array_on_stdin_is_refused_whole(
        amqp_settings: Settings, amqp_env: dict[str, str]) -> None:
    result = await asyncio.to_thread(
        run_gapless, ["publish", "--file", "-"], amqp_env,
        input_text=json.dumps([invoice("s-1"), invoice("s-2")], indent=2))
    refused_whole(result, f"stdin: line 1: a JSON array; {HINT}")
    assert set((await queue_depths(amqp_settings)).values()) == {0}


async def test_json_lines_with_a_broken_first_line_are_still_published_line_by_line(
        amqp_settings: Settings, amqp_env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "invoices.jsonl"
    path.write_text('{"invoice_id": "broken", \n' + json.dumps(invoice("j-1")) + "\n"
                    + json.dumps(invoice("j-2")) + "\n", encoding="utf-8")
    result = await asyncio.to_thread(run_gapless, ["publish", "--file", str(path)], amqp_env)
    assert result.returncode == 1, result.stderr
    assert result.stdout.strip() == "published 2, confirmed 2, refused 1"
    assert "refused line 1: body is not valid JSON" in result.stderr
    assert sum((await queue_depths(amqp_settings)).values()) == 2
