"""Where the API's links point (gapless.api.deps.Links): the public URL, a trusted Host, or the
address the connection came in on; never a host a client merely names."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from starlette.requests import Request

from gapless.api.deps import Links
from gapless.settings import Settings


def request(host: str | None, server: tuple[str, int] | None = ("10.0.0.5", 8080),
            scheme: str = "http") -> Request:
    headers = [] if host is None else [(b"host", host.encode("latin-1"))]
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "headers": headers,
                             "server": server, "scheme": scheme, "root_path": ""}
    return Request(scope)


def links(**settings: Any) -> Links:
    return Links.from_settings(Settings(**settings))


@pytest.mark.parametrize(("host", "base"), [
    ("localhost:8080", "http://localhost:8080"),
    ("LocalHost", "http://localhost"),
    ("127.0.0.1:9", "http://127.0.0.1:9"),
    ("[::1]:8080", "http://[::1]:8080"),
    ("api.example", "http://api.example"),
    ("api.example:8443", "http://api.example:8443"),
    # Untrusted or malformed: the address the connection came in on.
    ("evil.example", "http://10.0.0.5:8080"),
    ("localhost/evil.example", "http://10.0.0.5:8080"),
    ("localhost:8080@evil.example", "http://10.0.0.5:8080"),
    ("localhost:99999999", "http://10.0.0.5:8080"),
    ("", "http://10.0.0.5:8080"),
    (None, "http://10.0.0.5:8080"),
])
def test_links_use_a_trusted_host_or_the_address_connected_to(host: str | None,
                                                                base: str) -> None:
    assert links(api_trusted_hosts=" api.example ,").base(request(host)) == base


def test_the_address_connected_to_is_written_as_a_url_authority() -> None:
    plain = links()
    assert plain.base(request("evil.example", ("::1", 8080))) == "http://[::1]:8080"
    assert plain.base(request("evil.example", ("10.0.0.5", 443), "https")) == "https://10.0.0.5"
    assert plain.base(request("evil.example", None)) == "http://localhost"


def test_the_public_url_wins_over_any_host() -> None:
    public = links(api_public_url="https://example.com/gapless/")
    for host in ("evil.example", "localhost:8080", None):
        assert public.base(request(host)) == "https://example.com/gapless"


@pytest.mark.parametrize("url", ["ftp://example.com", "example.com", "https://",
                                 "https://example.com/?a=1", "https://u:p@example.com",
                                 "https://example.com:notaport"])
def test_a_public_url_that_is_not_a_base_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match=r"public URL|port"):
        Settings(api_public_url=url)
