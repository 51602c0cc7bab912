"""The integrator: the third party that clears documents with the tax authority.

``base`` defines what the worker and recovery rely on (an adapter with ``send`` and ``lookup``,
and the four classes of failure); ``guard`` puts retries and the circuit breaker around an
adapter; ``http`` speaks the contract's HTTP API and ``nilvera`` Nilvera's REST API, both over the
one HTTP client of ``transport``; ``mock`` is the integrator stand-in the tests run against. The
adapter in use is chosen by ``GAPLESS_INTEGRATOR_ADAPTER`` (an import path), so a real integrator
plugs in without touching the worker.
"""

from gapless.integrator.base import (
    Document,
    DuplicateOfAnother,
    DuplicateOfMine,
    Integrator,
    IntegratorError,
    PermanentRejection,
    Receipt,
    TransientIntegratorError,
    load_integrator,
)

__all__ = [
    "Document",
    "DuplicateOfAnother",
    "DuplicateOfMine",
    "Integrator",
    "IntegratorError",
    "PermanentRejection",
    "Receipt",
    "TransientIntegratorError",
    "load_integrator",
]
