"""A small synchronous client for the mock integrator's HTTP API (the test oracle)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import GaplessProcess, free_port, wait_for_port


class MockIntegratorClient:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=10)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def set_faults(self, **faults: Any) -> dict[str, Any]:
        """PUT /admin/faults: latency_ms=[min,max], transient_rate, reject_rate,
        lost_response_rate, down."""
        return self._json("PUT", "/admin/faults", json=faults)  # type: ignore[no-any-return]

    def faults(self) -> dict[str, Any]:
        return self._json("GET", "/admin/faults")  # type: ignore[no-any-return]

    def reset(self) -> dict[str, Any]:
        """POST /admin/reset: forget ledger and stats, re-seed the fault draws (faults stay)."""
        return self._json("POST", "/admin/reset")  # type: ignore[no-any-return]

    def set_recipients(self, registered: dict[str, list[str]] | dict[str, dict[str, list[str]]]
                       ) -> dict[str, Any]:
        """PUT /admin/recipients: register recipients with their aliases, per tax id a list
        (e-Fatura aliases) or ``{"invoice": [...], "despatch": [...]}`` (either kind optional);
        an empty list unregisters (that kind)."""
        return self._json(  # type: ignore[no-any-return]
            "PUT", "/admin/recipients", json=registered)

    def set_despatch_recipients(self, registered: dict[str, list[str]]) -> dict[str, Any]:
        """PUT /admin/recipients in the object form: register e-İrsaliye users with their
        dispatch-note aliases (an empty list unregisters them as e-İrsaliye users); their
        e-Fatura aliases are left as they are."""
        return self.set_recipients({tax_id: {"despatch": aliases}
                                    for tax_id, aliases in registered.items()})

    def put_answers(self, answers: dict[str, dict[str, Any]]) -> httpx.Response:
        """PUT /admin/answers, the answer as it came (a refusal is not raised)."""
        return self._http.put("/admin/answers", json=answers)

    def set_answers(self, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """PUT /admin/answers: the receivers answer accepted documents, per UUID
        ``{"code": "KABUL" | "RED" | "KISMIKABUL", "lines": [{line, received, short, rejected,
        reason}]}`` (lines: dispatch notes only); raises on a refusal."""
        response = self.put_answers(answers)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def answer(self, tenant: str, uuid: str) -> dict[str, Any] | None:
        """The receiver's answer the status of an accepted document reports (None: not yet)."""
        response = self.gib_status(tenant, uuid)
        response.raise_for_status()
        return response.json()["answer"]  # type: ignore[no-any-return]

    def set_gib_status(self, verdicts: dict[str, dict[str, str]]) -> dict[str, Any]:
        """PUT /admin/gib-status: GİB's verdict per document UUID (``"*"``: the default),
        e.g. ``{uuid: {"state": "refused", "detail": "..."}}``."""
        return self._json(  # type: ignore[no-any-return]
            "PUT", "/admin/gib-status", json=verdicts)

    def gib_status(self, tenant: str, uuid: str) -> httpx.Response:
        """GET /invoices/{tenant}/by-uuid/{uuid}/status."""
        return self._http.get(f"/invoices/{tenant}/by-uuid/{uuid}/status")

    def recipient(self, tax_id: str) -> httpx.Response:
        return self._http.get(f"/recipients/{tax_id}")

    def ledger(self) -> list[dict[str, Any]]:
        return self._json("GET", "/ledger")  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        return self._json("GET", "/admin/stats")  # type: ignore[no-any-return]

    def get(self, tenant: str, number: str) -> httpx.Response:
        return self._http.get(f"/invoices/{tenant}/{number}")

    def document(self, tenant: str, number: str) -> httpx.Response:
        """GET /invoices/{tenant}/{number}/document: the document exactly as accepted."""
        return self._http.get(f"/invoices/{tenant}/{number}/document")

    def by_uuid(self, tenant: str, uuid: str) -> httpx.Response:
        return self._http.get(f"/invoices/{tenant}/by-uuid/{uuid}")

    def post(self, document: dict[str, Any]) -> httpx.Response:
        return self._http.post("/invoices", json=document)

    def close(self) -> None:
        self._http.close()


@contextmanager
def running_mock(log_dir: Path, *, seed: int,
                 env: dict[str, str] | None = None) -> Iterator[MockIntegratorClient]:
    """``gapless mock-integrator`` on a free port, no faults, its fault draws seeded with
    ``seed``, run without this process's ``GAPLESS_*`` variables (plus ``env``); a client for
    it while the block runs, the process stopped after."""
    port = free_port()
    child = {key: value for key, value in os.environ.items() if not key.startswith("GAPLESS_")}
    proc = GaplessProcess(["mock-integrator", "--port", str(port), "--seed", str(seed)],
                          {**child, **(env or {})}, log_dir, "mock-integrator")
    try:
        wait_for_port(port)
        client = MockIntegratorClient(f"http://127.0.0.1:{port}")
        yield client
        client.close()
    finally:
        proc.close()
