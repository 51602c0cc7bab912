"""Fixtures of the acceptance tier: private PostgreSQL and RabbitMQ servers for the tests that
restart them (tests/private_services.py). What those tests saw is reported through the
``summary_line`` fixture (tests/conftest.py)."""

from __future__ import annotations

from tests.private_services import private_postgres, private_rabbitmq

__all__ = ["private_postgres", "private_rabbitmq"]
