"""Loading the pluggable parts named in settings: ``package.module:attribute``.

The integrator adapter (``GAPLESS_INTEGRATOR_ADAPTER``) and the worker's flow hooks
(``GAPLESS_WORKER_HOOKS``) are both named this way; a name that cannot be loaded stops the process
at start-up with a ConfigurationError naming the setting.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from gapless.errors import ConfigurationError


def load_factory(path: str, *, setting: str, shape: str, what: str) -> Callable[..., Any]:
    """The attribute named by ``path`` (``module:attribute``).

    ``setting`` is the variable that named it, ``shape`` how the name must look (for the message,
    e.g. ``module:Class``), ``what`` what it is (``integrator adapter``)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"{setting} must be '{shape}', got {path!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load {what} {path!r}: {exc}") from exc
    if not callable(factory):
        raise ConfigurationError(f"{what} {path!r} is not callable")
    return factory  # type: ignore[no-any-return]
