"""A small synchronous client for the mock integrator's HTTP API (the test oracle)."""

from __future__ import annotations

from typing import Any

import httpx


class MockIntegratorClient:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=10)

    def set_faults(self, **faults: Any) -> dict[str, Any]:
        """PUT /admin/faults: latency_ms=[min,max], transient_rate, reject_rate,
        lost_response_rate, down."""
        response = self._http.put("/admin/faults", json=faults)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def faults(self) -> dict[str, Any]:
        response = self._http.get("/admin/faults")
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def reset(self) -> dict[str, Any]:
        """POST /admin/reset: forget ledger and stats, re-seed the fault draws (faults stay)."""
        response = self._http.post("/admin/reset")
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def ledger(self) -> list[dict[str, Any]]:
        response = self._http.get("/ledger")
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        response = self._http.get("/admin/stats")
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

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
