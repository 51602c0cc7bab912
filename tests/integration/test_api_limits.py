"""What a hostile HTTP client cannot do to a real ``gapless api`` process over real TCP: hold it
with oversized or slowly sent requests (the request-head limits and the request timeout cut them
off while normal requests keep being served), exhaust it with connections, or have the links in
its answers name a host of its choosing.
"""

from __future__ import annotations

import contextlib
import secrets
import select
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import ApiServers
from tests.helpers import wait_until
from tests.integration.test_api import define_series, invoice_message

#: Margin on a documented deadline for a process on a busy two-core machine.
MARGIN_S = 8.0


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def healthy(url: str) -> None:
    """A normal request, on a connection of its own, is served."""
    response = httpx.get(f"{url}/healthz", timeout=10)
    assert response.status_code == 200, response.text


def answer_or_eof(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends before it closes ``sock`` (b"" for a bare close or a reset);
    fails if it still holds the connection open after ``timeout``."""
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        raise AssertionError(f"the connection is still open after {timeout}s; the server "
                             f"sent {received[:80]!r}") from None
    return received


# ---------------------------------------------------------------------------- request heads

@pytest.mark.parametrize("head", [
    pytest.param(b"X-Big: " + b"a" * (1024 * 1024) + b"\r\n", id="one-1MiB-header"),
    pytest.param(b"".join(b"X-H%d: v\r\n" % n for n in range(101)), id="101-headers"),
])
def test_an_oversized_request_head_is_refused_while_normal_requests_are_served(
        api_servers: ApiServers, head: bytes) -> None:
    url, _ = api_servers.start(extra_args=("--insecure-no-auth",))
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b"\r\n"
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=10) as sock:

        def send() -> None:
            # The server may close before it has read it all: that is one of the answers.
            with contextlib.suppress(OSError):
                sock.sendall(request)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        healthy(url)
        answer = answer_or_eof(sock, MARGIN_S)
        sender.join(MARGIN_S)
    # 431 (Request Header Fields Too Large), or closed before the head was whole; never served.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    healthy(url)


def test_a_head_within_the_limits_is_served(api_servers: ApiServers) -> None:
    url, _ = api_servers.start(extra_args=("--insecure-no-auth",))
    headers = {f"X-H{n}": "v" * 100 for n in range(90)}
    response = httpx.get(f"{url}/healthz", headers=headers, timeout=10)
    assert response.status_code == 200, response.text


# ---------------------------------------------------------------------------- slow clients

def test_slow_partial_requests_are_closed_within_the_request_timeout(
        api_servers: ApiServers) -> None:
    """50 connections each sending its request a byte a second (40 in the head, 10 in the
    body) are all closed within --request-timeout; normal requests are served meanwhile."""
    timeout_s = 3.0
    url, _ = api_servers.start(extra_args=("--insecure-no-auth",),
                               env={"GAPLESS_API_REQUEST_TIMEOUT_S": str(timeout_s)})
    port = port_of(url)
    heads = [b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "] * 40
    bodies = [b"POST /v1/invoices HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
              b"application/json\r\nContent-Length: 1000\r\n\r\n{"] * 10
    open_: dict[socket.socket, bytes] = {}
    for start in heads + bodies:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(start)
        open_[sock] = b""
    cut: dict[socket.socket, bytes] = {}
    started = time.monotonic()
    try:
        while open_ and time.monotonic() - started < timeout_s + MARGIN_S:
            # Wait up to a second for the server to answer or close any of them; then each
            # still open sends one more byte.
            readable, _, _ = select.select(list(open_), [], [], 1.0)
            for sock in readable:
                try:
                    chunk = sock.recv(65536)
                except (ConnectionResetError, BrokenPipeError):
                    chunk = b""
                if chunk:
                    open_[sock] += chunk
                else:
                    cut[sock] = open_.pop(sock)
            for sock in list(open_):
                try:
                    sock.sendall(b"a")
                except OSError:
                    cut[sock] = open_.pop(sock)
            healthy(url)
        assert not open_, (f"{len(open_)} of 50 slow requests still open "
                           f"{timeout_s + MARGIN_S}s after they started")
        assert len(cut) == 50
        for answer in cut.values():
            # A head cut off is answered 408 (or just closed); a body cut off is closed, after
            # whatever the application answered (here 503: no database, or a refusal).
            assert b"HTTP/1.1 200 " not in answer, answer[:200]
    finally:
        for sock in [*open_, *cut]:
            sock.close()
    healthy(url)


# ---------------------------------------------------------------------------- connections

def test_connections_beyond_the_limit_are_closed_at_once(api_servers: ApiServers) -> None:
    url, _ = api_servers.start(extra_args=("--insecure-no-auth", "--limit-concurrency", "4",
                                           "--max-connections", "6", "--request-timeout", "3"))
    port = port_of(url)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(6)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            assert answer_or_eof(extra, MARGIN_S) == b""
        # Once the idle ones are cut off by the request timeout, requests are served again.
        for sock in idle:
            assert answer_or_eof(sock, 3 + MARGIN_S) == b""

        def served() -> bool:
            return httpx.get(f"{url}/healthz", timeout=10).status_code == 200

        wait_until(served, MARGIN_S, message="a request to be served again")
    finally:
        for sock in idle:
            sock.close()


def test_beyond_limit_concurrency_a_request_is_answered_503(api_servers: ApiServers) -> None:
    url, _ = api_servers.start(extra_args=("--insecure-no-auth",),
                               env={"GAPLESS_API_LIMIT_CONCURRENCY": "3"})
    port = port_of(url)
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    try:
        response = httpx.get(f"{url}/healthz", timeout=10)
        assert response.status_code == 503
    finally:
        for sock in idle:
            sock.close()


# ---------------------------------------------------------------------------- links

@pytest.fixture
def token() -> str:
    return secrets.token_urlsafe(24)


def links_of(url: str, token: str, host: str) -> list[str]:
    """Location, status_url, next and poll_more of answers to requests naming ``host``."""
    headers = {"Authorization": f"Bearer {token}", "Host": host}
    with httpx.Client(timeout=15, headers=headers) as http:
        accepted = http.post(f"{url}/v1/invoices", json=invoice_message("link-1"))
        assert accepted.status_code == 202, accepted.text
        page = http.get(f"{url}/v1/events", params={"limit": 1})
        assert page.status_code == 200, page.text
    found: list[Any] = [accepted.headers["Location"], accepted.json()["status_url"],
                        page.json()["next"], page.json()["poll_more"]]
    return [link for link in found if link is not None]


async def test_links_never_name_an_untrusted_host(api_servers: ApiServers,
                                                  engine: AsyncEngine, token: str) -> None:
    await define_series(engine)
    url, _ = api_servers.start(token)
    links = links_of(url, token, "evil.example")
    assert len(links) >= 3
    for link in links:
        assert "evil.example" not in link
        assert link.startswith(url + "/"), link  # the address the request came in on
    # A loopback name is trusted; so is a name given with --trusted-host.
    assert all(link.startswith("http://localhost:8443/")
               for link in links_of(url, token, "localhost:8443"))
    trusting, _ = api_servers.start(token, extra_args=("--trusted-host", "api.example"))
    assert all(link.startswith("http://api.example:8443/")
               for link in links_of(trusting, token, "api.example:8443"))
    assert all("evil.example" not in link for link in links_of(trusting, token, "evil.example"))


async def test_links_are_built_from_the_public_url(api_servers: ApiServers,
                                                   engine: AsyncEngine, token: str) -> None:
    await define_series(engine)
    url, _ = api_servers.start(token, env={"GAPLESS_API_PUBLIC_URL": "https://gapless.example/"})
    for host in ("evil.example", "localhost"):
        links = links_of(url, token, host)
        assert links
        assert all(link.startswith("https://gapless.example/v1/") for link in links), links
