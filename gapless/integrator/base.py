"""The integrator adapter interface and its error classes."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gapless.errors import ConfigurationError, GaplessError

if TYPE_CHECKING:
    from gapless.settings import Settings


@dataclass(frozen=True)
class Document:
    """What is sent: the invoice under its pinned number."""

    tenant: str
    number: str
    invoice_id: str
    document: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Receipt:
    """The integrator's word that ``number`` is accepted, as ``invoice_id``, under ``ref``."""

    tenant: str
    number: str
    invoice_id: str
    ref: str


class IntegratorError(GaplessError):
    """Base of every integrator failure."""


class TransientIntegratorError(IntegratorError):
    """Outcome unknown or temporary (timeout, 5xx, connection error): retry with the same number."""


class PermanentRejection(IntegratorError):
    """The integrator refuses the document for a business reason; retrying as-is cannot help."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DuplicateOfMine(IntegratorError):
    """The number is already accepted for this very invoice (an earlier send arrived)."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(f"number {receipt.number} already accepted for this invoice")
        self.receipt = receipt


class DuplicateOfAnother(IntegratorError):
    """The number is held by a different invoice at the integrator: an alarm, never retried."""

    def __init__(self, number: str, holder_invoice_id: str) -> None:
        super().__init__(f"number {number} is held by another invoice at the integrator")
        self.number = number
        self.holder_invoice_id = holder_invoice_id


@runtime_checkable
class Integrator(Protocol):
    """What the worker and recovery need of an integrator. Implementations must be async-safe."""

    async def send(self, document: Document) -> Receipt:
        """Submit a document. Raises one of the IntegratorError subclasses on failure."""
        ...

    async def lookup(self, tenant: str, number: str) -> Receipt | None:
        """Ask whether ``number`` was accepted; None when it was not.

        Raises TransientIntegratorError when the integrator cannot answer.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def load_integrator(settings: Settings) -> Integrator:
    """Build the adapter named by ``settings.integrator_adapter`` (``module:Class``).

    The class is called with the settings object.
    """
    path = settings.integrator_adapter
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"GAPLESS_INTEGRATOR_ADAPTER must be 'module:Class', got {path!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load integrator adapter {path!r}: {exc}") from exc
    adapter = factory(settings)
    if not isinstance(adapter, Integrator):
        raise ConfigurationError(f"{path!r} does not provide send, lookup and aclose")
    return adapter
