"""Console log lines carry data (ids, reasons) to an operator's terminal: as text only."""

from __future__ import annotations

import ast
import os
import subprocess
import sys


def test_console_log_lines_escape_terminal_controls_in_values() -> None:
    script = (
        "from gapless.logging import configure_logging, get_logger\n"
        "configure_logging('console')\n"
        "log = get_logger('t')\n"
        "log.info('message_refused', invoice_id='\\x1b]8;;http://evil.example\\x1b\\\\x',\n"
        "         reason='bad \\u202e\\x9b2J\\u2028 end')\n"
        "try:\n"
        "    raise ValueError('boom\\x1b[2J')\n"
        "except ValueError:\n"
        "    log.exception('failed')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    err = result.stderr
    for forbidden in (b"\x1b", b"\xe2\x80\xae", b"\xc2\x9b", b"\xe2\x80\xa8"):
        assert forbidden not in err, err
    text = err.decode()
    assert "\\x1b]8;;http://evil.example" in text
    assert "\\u202e" in text
    assert "Traceback (most recent call last):\n" in text  # a traceback keeps its lines
    assert "boom\\x1b[2J" in text


def test_json_log_lines_stay_json() -> None:
    script = (
        "from gapless.logging import configure_logging, get_logger\n"
        "configure_logging('json')\n"
        "get_logger('t').info('x', reason='a\\x1bb')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert b"\x1b" not in result.stderr
    assert b'"reason": "a\\u001bb"' in result.stderr


def test_a_log_line_is_one_write_even_when_stderr_is_unbuffered() -> None:
    """Every issued invoice logs a line: written with its newline in one write, it is one
    system call, also with PYTHONUNBUFFERED=1 (the image's setting), where writing the line and
    its newline apart made two."""
    script = (
        "import sys\n"
        "writes = []\n"
        "class Recording:\n"
        "    def write(self, text):\n"
        "        writes.append(text)\n"
        "        return len(text)\n"
        "    def flush(self):\n"
        "        pass\n"
        "    def isatty(self):\n"
        "        return False\n"
        "sys.stderr = Recording()\n"
        "from gapless.logging import configure_logging, get_logger\n"
        "configure_logging('json')\n"
        "log = get_logger('t')\n"
        "log.info('invoice_issued', n=1)\n"
        "log.info('invoice_issued', n=2)\n"
        "sys.__stdout__.write(repr(writes))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    writes = ast.literal_eval(result.stdout.decode())
    assert len(writes) == 2, writes
    assert all(text.startswith("{") and text.endswith("}\n") for text in writes), writes
