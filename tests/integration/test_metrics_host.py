"""``gapless worker`` and ``gapless recovery`` serve their Prometheus metrics on the loopback
interface unless told otherwise (``--metrics-host`` / ``GAPLESS_METRICS_HOST``): the listening
socket's address is read from the kernel (/proc/net/tcp, tcp6)."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers import GaplessProcess, free_port, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads the listening sockets from /proc/net")


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port`` (IPv4 and IPv6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if fields[3] != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            # The kernel prints each 32-bit word of the address in host (little-endian) order.
            raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1]
                           for i in range(0, len(address), 8))
            found.add(str(ipaddress.ip_address(raw)))
    return found


COMMANDS = {
    "worker": ["worker", "--concurrency", "1"],
    "recovery": ["recovery", "--interval", "1"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("args", "expected"), [
    pytest.param((), "127.0.0.1", id="default"),
    pytest.param(("--metrics-host", "0.0.0.0"), "0.0.0.0", id="every-interface"),
])
def test_metrics_listen_on_loopback_unless_told(command: str, args: tuple[str, ...],
                                                expected: str, gapless_env: dict[str, str],
                                                log_dir: Path) -> None:
    port = free_port()
    proc = GaplessProcess([*COMMANDS[command], "--metrics-port", str(port), *args],
                          gapless_env, log_dir, command)
    try:
        wait_until(lambda: listening_addresses(port) or not proc.alive(), 60,
                   message=f"gapless {command} to serve its metrics")
        assert proc.alive(), proc.output()[-3000:]
        assert listening_addresses(port) == {expected}
        scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert scrape.status_code == 200
        assert f"gapless_{command}_" in scrape.text
    finally:
        proc.terminate(timeout=20)
        proc.close()
