from __future__ import annotations

import pytest
from pydantic import ValidationError

from gapless.settings import Settings, load_settings


def test_contract_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("DATABASE_URL", "AMQP_URL", "QUEUE", "INTEGRATOR_URL", "CLUSTER_ID"):
        monkeypatch.delenv(f"GAPLESS_{key}", raising=False)
    settings = Settings()
    assert settings.database_url == "postgresql://postgres@127.0.0.1:5432/gapless"
    assert settings.amqp_url == "amqp://guest:guest@127.0.0.1:5672/"
    assert settings.queue == "invoices"
    assert settings.integrator_url == "http://127.0.0.1:8085"
    assert settings.cluster_id == 0


def test_environment_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GAPLESS_QUEUE", "from-env")
    monkeypatch.setenv("GAPLESS_CLUSTER_ID", "12")
    assert load_settings().queue == "from-env"
    settings = load_settings(queue="from-flag", cluster_id=None)
    assert (settings.queue, settings.cluster_id) == ("from-flag", 12)


@pytest.mark.parametrize("value", ["-1", "32768", "abc"])
def test_bad_cluster_id_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GAPLESS_CLUSTER_ID", value)
    with pytest.raises(ValidationError, match="cluster_id"):
        Settings()


def test_api_token_is_not_in_the_repr() -> None:
    assert "s3cret" not in repr(Settings(api_token="s3cret"))
