"""Hooks at the named steps of the issuing flow: a no-op in production.

The flow calls a :class:`FlowHooks` at each step, in the order a message meets them:

``before_reserve_commit``
    inside the claim, number sealed and lease taken, not yet committed (locks held) — only
    reached when the hooks ask for it (:meth:`FlowHooks.wants`): the claim then runs in an
    explicit transaction instead of one autocommit statement;
``after_reserve_commit``
    the claim committed, the integrator not yet called;
``during_call``
    around the integrator call (:meth:`FlowHooks.around_call`);
``after_call``
    the integrator answered (any outcome), nothing recorded yet;
``after_outcome_commit``
    the outcome committed, the message not yet acked.

``GAPLESS_WORKER_HOOKS=module:factory`` names a factory (called with no argument) of another
implementation; the test suites use it to kill or pause a worker at a step
(``tests/faults.py``). Production code never imports an implementation other than
:data:`NO_HOOKS`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import Protocol, TypeVar, runtime_checkable

from gapless.errors import ConfigurationError
from gapless.plugins import load_factory

T = TypeVar("T")

STEPS = ("before_reserve_commit", "after_reserve_commit", "during_call", "after_call",
         "after_outcome_commit")
HOOKS_ENV = "GAPLESS_WORKER_HOOKS"


@runtime_checkable
class FlowHooks(Protocol):
    """What the flow calls at its steps."""

    def wants(self, step: str) -> bool:
        """Whether ``step`` must be reached (``before_reserve_commit`` costs a transaction)."""
        ...

    async def reached(self, step: str) -> None:
        """A message has reached ``step``."""
        ...

    async def around_call(self, call: Awaitable[T]) -> T:
        """Run the integrator call (``during_call``)."""
        ...


class NoHooks:
    """The production hooks: nothing happens at any step."""

    def wants(self, step: str) -> bool:
        return False

    async def reached(self, step: str) -> None:
        return None

    async def around_call(self, call: Awaitable[T]) -> T:
        return await call


NO_HOOKS: FlowHooks = NoHooks()


def load_hooks(path: str | None = None) -> FlowHooks:
    """The hooks named by ``path`` (default: ``GAPLESS_WORKER_HOOKS``), or :data:`NO_HOOKS`.

    Raises ConfigurationError for a path that cannot be loaded or a factory that fails (e.g. a
    malformed setting of the test-only fault hooks), so the worker stops before consuming.
    """
    path = os.environ.get(HOOKS_ENV, "").strip() if path is None else path.strip()
    if not path:
        return NO_HOOKS
    factory = load_factory(path, setting=HOOKS_ENV, shape="module:factory", what="worker hooks")
    hooks = factory()
    if not isinstance(hooks, FlowHooks):
        raise ConfigurationError(f"{path!r} does not provide wants, reached and around_call")
    return hooks
