"""``gapless`` commands in processes forked from a warm interpreter, for the tests.

Every test that runs a command pays for a new Python process: ``python -m gapless series list``
spends about a second of CPU importing SQLAlchemy, psycopg, aio-pika, pydantic, typer and rich
before it reads a row, and the suite starts thousands of them. Here the third-party libraries are
imported once per test process, in a fork server (:mod:`multiprocessing`'s ``forkserver``), and
each command is a fresh process forked from it: its own pid, environment, working directory,
standard streams and exit code, signals and ``kill -9`` as before, and gapless's own modules
imported anew in every process (nothing of gapless is preloaded, so a missing import still fails
as it would for a user).

Only the libraries are shared, and none of them reads the environment at import in a way the
tests vary (``COLUMNS``, ``TERM`` and the ``GAPLESS_*`` settings are read when a command runs).
``GAPLESS_TEST_EXEC=1`` runs every command with ``exec`` instead, as the README's and the
wheel's tests always do.
"""

from __future__ import annotations

import atexit
import functools
import io
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import tempfile
from multiprocessing.context import ForkServerContext
from pathlib import Path

#: Imported once in the fork server: what every command pays for before it does anything.
PRELOAD = (
    "asyncio", "json", "typing", "dataclasses", "decimal", "uuid", "zoneinfo", "ssl",
    "typer", "click", "rich.console", "rich.table", "rich.text", "rich.markup",
    "pydantic", "pydantic_settings", "structlog", "structlog.dev", "structlog.processors",
    "sqlalchemy", "sqlalchemy.ext.asyncio", "sqlalchemy.dialects.postgresql",
    "sqlalchemy.dialects.postgresql.psycopg", "psycopg", "psycopg_pool",
    "aio_pika", "aiormq", "pamqp", "aiohttp", "httpx", "tenacity", "pybreaker",
    "prometheus_client", "lxml.etree", "cryptography.hazmat.primitives.asymmetric.ed25519",
    "stdnum", "fastapi", "starlette", "uvicorn", "alembic",
)

def enabled() -> bool:
    return os.environ.get("GAPLESS_TEST_EXEC", "") != "1"


@functools.cache
def _server() -> ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def _text_stream(fd: int, mode: str, *, errors: str, line_buffering: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    buffered: io.BufferedReader | io.BufferedWriter = (io.BufferedReader(raw) if mode == "r"
                                   else io.BufferedWriter(raw))
    encoding, _, asked_errors = os.environ.get("PYTHONIOENCODING", "utf-8").partition(":")
    return io.TextIOWrapper(buffered, encoding=encoding or "utf-8",
                            errors=asked_errors or errors, line_buffering=line_buffering)


def _child(args: list[str], env: dict[str, str], cwd: str, stdin_path: str,
           stdout_path: str, stderr_path: str | None, address_space: int | None) -> None:
    """In the forked process: become ``python -m gapless ARGS`` run in ``cwd`` with ``env``
    (its address space limited to ``address_space`` bytes when given)."""
    if address_space is not None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    stdin = os.open(stdin_path, os.O_RDONLY)
    stdout = os.open(stdout_path, os.O_WRONLY | os.O_APPEND)
    stderr = stdout if stderr_path is None else os.open(stderr_path, os.O_WRONLY | os.O_APPEND)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        if fd != target:
            os.dup2(fd, target)
    for fd in {stdin, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    sys.stdin = _text_stream(0, "r", errors="strict", line_buffering=False)
    sys.stdout = _text_stream(1, "w", errors="strict", line_buffering=False)
    sys.stderr = _text_stream(2, "w", errors="backslashreplace", line_buffering=True)
    sys.argv = [str(Path(cwd) / "gapless" / "__main__.py"), *args]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        from gapless.cli import main

        main(args)
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()


class ForkedProcess:
    """A ``gapless`` command running in a forked process: the part of :class:`subprocess.Popen`
    the tests use (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``kill``)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path, *,
                 stdout_path: Path, stderr_path: Path | None = None,
                 stdin_path: Path | None = None, address_space: int | None = None) -> None:
        self.args = args
        self._process = _server().Process(
            target=_child, daemon=True,
            args=(args, dict(env), str(cwd), str(stdin_path or os.devnull), str(stdout_path),
                  None if stderr_path is None else str(stderr_path), address_space))
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _decoded(data: bytes) -> str:
    """Bytes as ``subprocess.run(text=True)`` gives them: the locale's encoding, universal
    newlines."""
    return io.TextIOWrapper(io.BytesIO(data)).read()


def run(command: list[str], args: list[str], env: dict[str, str], cwd: Path, *,
        timeout: float, input_text: str | None = None,
        address_space: int | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(command + args, capture_output=True, text=True)`` of a forked
    ``gapless`` command (``command`` is what the result names), its address space limited to
    ``address_space`` bytes when given."""
    with tempfile.TemporaryDirectory(prefix="gapless-cli-") as folder:
        paths = {name: Path(folder) / name for name in ("in", "out", "err")}
        paths["in"].write_text(input_text or "")
        paths["out"].touch()
        paths["err"].touch()
        process = ForkedProcess(args, env, cwd, stdout_path=paths["out"],
                                stderr_path=paths["err"], stdin_path=paths["in"],
                                address_space=address_space)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            raise subprocess.TimeoutExpired(
                [*command, *args], timeout, output=_decoded(paths["out"].read_bytes()),
                stderr=_decoded(paths["err"].read_bytes())) from None
        return subprocess.CompletedProcess(
            [*command, *args], code, _decoded(paths["out"].read_bytes()),
            _decoded(paths["err"].read_bytes()))

