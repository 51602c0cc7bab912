"""Fault injection at the issuing flow's steps — worker hooks for the test suites only.

A worker started with ``GAPLESS_WORKER_HOOKS=tests.faults:from_env`` (see :func:`fault_env`)
reads these variables once at start:

``GAPLESS_FAULT_KILL_AT="<step>[:<nth>]"``
    The worker kills itself with SIGKILL (no clean-up, no ack, no final log but one
    ``fault_kill`` line) when the ``nth`` message (default the 1st) reaches ``step``.

``GAPLESS_FAULT_PAUSE_AT="<step>:<seconds>"``
    Every message that reaches ``step`` waits that long there (to make a window reachable).

Steps: those of :mod:`worker.hooks`. At ``during_call`` the kill lands
``GAPLESS_FAULT_DURING_CALL_MS`` (default 50) milliseconds after the call started, or as the call
returns if it is quicker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gapless.errors import ConfigurationError
from gapless.logging import get_logger
from gapless.worker.hooks import HOOKS_ENV, STEPS

T = TypeVar("T")

KILL_ENV = "GAPLESS_FAULT_KILL_AT"
PAUSE_ENV = "GAPLESS_FAULT_PAUSE_AT"
DURING_CALL_ENV = "GAPLESS_FAULT_DURING_CALL_MS"

log = get_logger("gapless.worker.faults")


def fault_env(*, kill_at: str | None = None, pause_at: str | None = None,
              during_call_ms: float | None = None) -> dict[str, str]:
    """Environment for a ``gapless worker`` subprocess that kills or pauses itself at a step."""
    env = {HOOKS_ENV: "tests.faults:from_env"}
    if kill_at is not None:
        env[KILL_ENV] = kill_at
    if pause_at is not None:
        env[PAUSE_ENV] = pause_at
    if during_call_ms is not None:
        env[DURING_CALL_ENV] = f"{during_call_ms:g}"
    return env


def from_env() -> Faults:
    """The hooks factory named by ``GAPLESS_WORKER_HOOKS=tests.faults:from_env``."""
    return Faults.from_env()


@dataclass
class Faults:
    """The configured fault points (a :class:`worker.hooks.FlowHooks`); a default instance does
    nothing."""

    kill_step: str | None = None
    kill_nth: int = 1
    pause_step: str | None = None
    pause_s: float = 0.0
    during_call_s: float = 0.05
    _reached: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        """Parse the test-only variables; a malformed value is a ConfigurationError."""
        env = os.environ if env is None else env
        faults = cls()
        kill = env.get(KILL_ENV, "").strip()
        if kill:
            step, _, nth = kill.partition(":")
            faults.kill_step = _step(step, KILL_ENV)
            faults.kill_nth = int(_number(nth or "1", KILL_ENV, integer=True))
        pause = env.get(PAUSE_ENV, "").strip()
        if pause:
            step, _, seconds = pause.partition(":")
            faults.pause_step = _step(step, PAUSE_ENV)
            faults.pause_s = _number(seconds, PAUSE_ENV, integer=False)
        during = env.get(DURING_CALL_ENV, "").strip()
        if during:
            faults.during_call_s = _number(during, DURING_CALL_ENV, integer=False) / 1000
        return faults

    @property
    def active(self) -> bool:
        return self.kill_step is not None or self.pause_step is not None

    def wants(self, step: str) -> bool:
        return step in (self.kill_step, self.pause_step)

    async def reached(self, step: str) -> None:
        """A message has reached ``step``: pause and/or die there if so configured."""
        if self.pause_step == step:
            log.warning("fault_pause", step=step, seconds=self.pause_s)
            await asyncio.sleep(self.pause_s)
        if self.kill_step == step and self._count(step) == self.kill_nth:
            self.kill(step)

    async def around_call(self, call: Awaitable[T]) -> T:
        """Run the integrator call; with ``during_call`` configured, die while it is in flight."""
        if self.pause_step != "during_call" and self.kill_step != "during_call":
            return await call
        task = asyncio.ensure_future(call)
        if self.pause_step == "during_call":
            log.warning("fault_pause", step="during_call", seconds=self.pause_s)
            await asyncio.wait({task}, timeout=self.pause_s)
        if self.kill_step == "during_call" and self._count("during_call") == self.kill_nth:
            await asyncio.wait({task}, timeout=self.during_call_s)
            self.kill("during_call")
        return await task

    def _count(self, step: str) -> int:
        self._reached[step] = self._reached.get(step, 0) + 1
        return self._reached[step]

    @staticmethod
    def kill(step: str) -> None:
        log.warning("fault_kill", step=step, pid=os.getpid())
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _step(value: str, name: str) -> str:
    if value not in STEPS:
        raise ConfigurationError(f"{name}: unknown step {value!r}; use one of {', '.join(STEPS)}")
    return value


def _number(value: str, name: str, *, integer: bool) -> float:
    try:
        number = int(value) if integer else float(value)
    except ValueError:
        raise ConfigurationError(f"{name}: {value!r} is not a number") from None
    if number < (1 if integer else 0):
        raise ConfigurationError(f"{name}: {value!r} is out of range")
    return number
