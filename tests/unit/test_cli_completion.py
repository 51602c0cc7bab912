"""Shell completion: ``gapless --show-completion SHELL`` prints the script for that shell, and
the script's protocol completes commands. The shell is named explicitly (typer's switch that
turns its detection off), so the tests do not depend on the shell that runs them."""

from __future__ import annotations

import pytest

from tests.helpers import run_gapless

#: typer reads the shell from the parent process unless this is set; then the shell is the
#: option's value.
EXPLICIT_SHELL = {"PATH": "/usr/bin:/bin", "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", "complete -o default -F _gapless_completion gapless"),
    ("zsh", "#compdef gapless"),
    ("fish", "complete --command gapless"),
])
def test_show_completion_prints_the_script_of_the_shell(shell: str, marker: str) -> None:
    result = run_gapless(["--show-completion", shell], EXPLICIT_SHELL, timeout=30)
    assert result.returncode == 0, result.stderr
    assert marker in result.stdout
    assert "_GAPLESS_COMPLETE" in result.stdout
    assert result.stderr == ""


def test_the_completion_protocol_completes_commands_and_sub_commands() -> None:
    def complete(words: str, index: int) -> list[str]:
        result = run_gapless([], {"PATH": "/usr/bin:/bin", "_GAPLESS_COMPLETE": "complete_bash",
                                  "COMP_WORDS": words, "COMP_CWORD": str(index)}, timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    assert complete("gapless inv", 1) == ["invoice"]
    assert {"list", "show"} <= set(complete("gapless invoice ", 2))
    assert complete("gapless recovery --stuck", 2) == ["--stuck-after"]


def test_help_offers_install_and_show_completion() -> None:
    result = run_gapless(["--help"], {"PATH": "/usr/bin:/bin", "COLUMNS": "120"}, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "--install-completion" in result.stdout
    assert "--show-completion" in result.stdout
