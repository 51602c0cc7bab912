"""Statements of the HTTP API that are not domain operations (those live in invoices/feed)."""

#: Liveness of the database for /healthz: one round trip, no table touched, no lock.
PING = "SELECT 1"
