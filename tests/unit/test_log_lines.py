"""Console log lines carry data (ids, reasons) to an operator's terminal: as text only."""

from __future__ import annotations

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
