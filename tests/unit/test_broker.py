"""The node list of GAPLESS_AMQP_URL, and URLs shown without passwords."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gapless.settings import Settings
from gapless.urls import node_label, node_urls, redact_url, split_urls


def test_one_url_is_one_node() -> None:
    assert node_urls("amqp://guest:guest@127.0.0.1:5672/") == ["amqp://guest:guest@127.0.0.1:5672/"]


def test_comma_separated_urls_are_the_nodes_in_order() -> None:
    setting = "amqp://u:p@rmq1:5672/, amqp://u:p@rmq2:5673/vh,amqps://u:p@rmq3/"
    assert node_urls(setting) == ["amqp://u:p@rmq1:5672/", "amqp://u:p@rmq2:5673/vh",
                                  "amqps://u:p@rmq3/"]
    assert [node_label(url) for url in node_urls(setting)] == ["rmq1:5672", "rmq2:5673",
                                                               "rmq3:5672"]


def test_a_postgres_multi_host_url_is_one_url() -> None:
    url = "postgresql://u:pw@h1:5441,h2:5442/gapless?target_session_attrs=read-write"
    assert split_urls(url) == [url]
    assert redact_url(url) == ("postgresql://u:***@h1:5441,h2:5442/gapless"
                               "?target_session_attrs=read-write")


def test_every_node_is_shown_without_its_password() -> None:
    setting = "amqp://guest:one@rmq1:5672/,amqp://admin:two@rmq2:5672/"
    assert redact_url(setting) == "amqp://guest:***@rmq1:5672/,amqp://admin:***@rmq2:5672/"


@pytest.mark.parametrize("setting", ["", " , ", "http://rmq1:5672/",
                                     "amqp://rmq1/,postgresql://db/x"])
def test_a_setting_that_is_not_a_list_of_amqp_urls_is_refused(setting: str) -> None:
    with pytest.raises(ValidationError, match="amqp_url"):
        Settings(amqp_url=setting)


def test_quorum_mode_is_opt_in() -> None:
    assert Settings().queue_type == "classic"
    assert Settings(queue_type="quorum").queue_type == "quorum"
    with pytest.raises(ValidationError, match="queue_type"):
        Settings(queue_type="stream")


def test_the_reconnection_hook_exists_in_this_aio_pika() -> None:
    """NodesConnection turns to the next node by overriding the method aio-pika's robust
    connection opens every transport with; an aio-pika that renamed it must fail here, not
    silently reconnect to a lost node for ever."""
    from aio_pika.robust_connection import RobustConnection

    from gapless.amqp.nodes import NodesConnection

    assert callable(getattr(RobustConnection, "_RobustConnection__connect_transport", None))
    assert "_RobustConnection__connect_transport" in vars(NodesConnection)
