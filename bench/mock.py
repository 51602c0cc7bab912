"""Benchmark: requests per second of the mock integrator vs a bare uvicorn app, at zero latency.

    .venv/bin/python bench/mock.py [--seconds 5] [--connections 64] [--loaders 2] [--rounds 3]

Servers (each a subprocess, one process, uvicorn + httptools + uvloop, access log off):

* baseline — a bare ASGI callable that reads the body and answers 201 ``{"ref": "B"}``: the
             ceiling of uvicorn on this machine, no framework, no logic;
* mock     — the real ``gapless mock-integrator --seed 1`` (FastAPI, validation, ledger, stats).

Load: ``--loaders`` processes share ``--connections`` keep-alive connections, each connection one
request at a time, from a raw asyncio HTTP/1.1 client (no httpx: the client must not be the
bottleneck). Each loader warms up for one second, then counts the completed requests of the
measured window. Scenarios: POST /invoices with a new number each time (201), the same number
again (409), and GET /invoices/{tenant}/{number} of accepted numbers (200).

The same run compares the two well-kept asyncio HTTP clients for the integrator adapter, sending
the contract's POST /invoices with 64 calls in flight (the CPU each costs per call): httpx, and
aiohttp as :class:`gapless.integrator.http.HttpIntegrator` uses it. The adapter keeps the cheaper.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    ROOT,
    Proc,
    clean_env,
    cpu_seconds,
    free_port,
    json_document,
    machine,
    percentile,
    print_table,
    start_mock,
    wait_for_port,
)

WARMUP_S = 1.0


# -- the baseline server ---------------------------------------------------------------------------

async def baseline_app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """201 ``{"ref": "B"}`` to anything, after reading the request body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    body = b'{"ref":"B"}'
    await send({"type": "http.response.start", "status": 201,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def serve_baseline(port: int) -> None:
    import uvicorn

    uvicorn.run(baseline_app, host="127.0.0.1", port=port, access_log=False, log_level="warning",
                lifespan="off", http="httptools", backlog=2048)


# -- the load generator ----------------------------------------------------------------------------

def request_bytes(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
    if body:
        head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


def make_request(scenario: str, tenant: str, conn: int, i: int) -> bytes:
    if scenario == "accept":
        body = {"tenant": tenant, "number": f"N{conn}-{i}", "invoice_id": f"inv-{conn}-{i}",
                "document": {"customer": {"tax_id": "1234567890", "name": "Example Ltd"}}}
        return request_bytes("POST", "/invoices", json.dumps(body).encode())
    if scenario == "duplicate":
        body = {"tenant": tenant, "number": "DUP", "invoice_id": f"inv-{conn}-{i}",
                "document": {}}
        return request_bytes("POST", "/invoices", json.dumps(body).encode())
    if scenario == "lookup":
        return request_bytes("GET", f"/invoices/{tenant}/N{conn}-{i % 50}")
    raise ValueError(scenario)


async def connection(port: int, scenario: str, tenant: str, conn: int, start: float,
                     end: float, latencies: list[float], statuses: Counter[int]) -> int:
    """Run requests until ``end``; record those started after ``start``; return the total."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    i = 0
    try:
        while (now := time.perf_counter()) < end:
            writer.write(make_request(scenario, tenant, conn, i))
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            done = time.perf_counter()
            if now >= start:
                latencies.append(done - now)
                statuses[status] += 1
            i += 1
    finally:
        writer.close()
    return i


async def load(port: int, scenario: str, connections: int, seconds: float, tenant: str,
               offset: int) -> dict[str, Any]:
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    if scenario == "lookup":  # lookups need accepted numbers: 50 per connection
        setup_end = time.perf_counter() + 60
        await asyncio.gather(*(
            _prefill(port, tenant, offset + c, setup_end) for c in range(connections)))
    start = time.perf_counter() + WARMUP_S
    end = start + seconds
    totals = await asyncio.gather(*(connection(port, scenario, tenant, offset + c, start, end,
                                               latencies, statuses) for c in range(connections)))
    prefilled = 50 * connections if scenario == "lookup" else 0
    return {"requests": len(latencies), "all_requests": sum(totals) + prefilled,
            "seconds": seconds, "latencies": latencies, "statuses": dict(statuses)}


async def _prefill(port: int, tenant: str, conn: int, deadline: float) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for i in range(50):
            writer.write(make_request("accept", tenant, conn, i))
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line[15:]) for line in head.split(b"\r\n")
                           if line[:15].lower() == b"content-length:"), 0)
            await reader.readexactly(length)
            if time.perf_counter() > deadline:
                raise TimeoutError("prefill took too long")
    finally:
        writer.close()


def run_loader(args: argparse.Namespace) -> None:
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # plain asyncio is slower but fine
        pass
    result = asyncio.run(load(args.port, args.scenario, args.connections, args.seconds,
                              args.tenant, args.offset))
    json.dump(result, sys.stdout)


# -- the integrator client's own cost: httpx against aiohttp -----------------------------------

CLIENTS = ("httpx", "aiohttp")
ADAPTER_IN_FLIGHT = 64

def run_adapter_load(args: argparse.Namespace) -> None:
    """One client sending the contract's POST /invoices with ``args.connections`` calls in flight
    (uvloop, as the worker runs); prints its CPU per call.

    * ``aiohttp`` — :class:`gapless.integrator.http.HttpIntegrator`, as the worker uses it;
    * ``httpx``   — the same body through httpx, in its best configuration measured before (a
      pool of clients of 8 connections each, the call going to the least busy one: one client
      of many connections costs more per call, its pool scan is quadratic).
    """
    import uvloop

    from gapless.integrator.http import HttpIntegrator, request_body
    from gapless.settings import Settings

    url = f"http://127.0.0.1:{args.port}"

    async def run() -> dict[str, float]:
        if args.client == "aiohttp":
            adapter = HttpIntegrator(Settings(integrator_url=url))

            async def send(i: int) -> None:
                await adapter.send(json_document(args.tenant, f"A{i}", f"inv-{i}"))

            close = adapter.aclose
        else:
            import httpx

            clients = [httpx.AsyncClient(base_url=url, limits=httpx.Limits(
                max_connections=8, max_keepalive_connections=8)) for _ in range(16)]
            busy = [0] * len(clients)

            async def send(i: int) -> None:
                shard = min(range(len(clients)), key=busy.__getitem__)
                busy[shard] += 1
                try:
                    response = await clients[shard].post(
                        "/invoices", content=request_body(
                            json_document(args.tenant, f"A{i}", f"inv-{i}")),
                        headers={"content-type": "application/json"})
                    response.json()
                finally:
                    busy[shard] -= 1

            async def close() -> None:
                for client in clients:
                    await client.aclose()

        gate = asyncio.Semaphore(args.connections)
        calls = args.calls

        async def one(i: int) -> None:
            async with gate:
                await send(i)

        await asyncio.gather(*(one(-i - 1) for i in range(args.connections)))  # warm the pool
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(calls)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await close()
        return {"cpu_ms": cpu * 1000 / calls, "rps": calls / wall}

    json.dump(uvloop.run(run()), sys.stdout)


def measure_adapter(port: int, client: str, in_flight: int, calls: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--adapter-load", "--port", str(port), "--client", client,
         "--connections", str(in_flight), "--calls", str(calls),
         "--tenant", f"adapter-{client}-{time.monotonic_ns()}"],
        cwd=ROOT, capture_output=True, check=True, timeout=600).stdout
    return json.loads(out)  # type: ignore[no-any-return]


# -- orchestration ---------------------------------------------------------------------------------

def start_server(kind: str) -> Proc:
    """The baseline app or the real mock integrator, answering on a free port."""
    if kind == "mock":
        return start_mock(name="bench-mock-server")
    port = free_port()
    proc = Proc([sys.executable, __file__, "--serve-baseline", "--port", str(port)], clean_env(),
                "bench-mock-baseline", url=f"http://127.0.0.1:{port}")
    try:
        wait_for_port(port)
    except BaseException:
        proc.stop()
        raise
    return proc


def port_of(server: Proc) -> int:
    assert server.url is not None
    return int(server.url.rsplit(":", 1)[1])


def measure(port: int, pid: int, scenario: str, connections: int, loaders: int,
            seconds: float) -> dict[str, Any]:
    tenant = f"bench-{scenario}-{time.monotonic_ns()}"
    shares = [connections // loaders + (1 if i < connections % loaders else 0)
              for i in range(loaders)]
    procs = []
    offset = 0
    for share in shares:
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--load", "--port", str(port), "--scenario", scenario,
             "--connections", str(share), "--seconds", str(seconds), "--tenant", tenant,
             "--offset", str(offset)], cwd=ROOT, stdout=subprocess.PIPE))
        offset += share
    cpu_before = cpu_seconds(pid)
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"loader failed with exit code {proc.returncode}")
        results.append(json.loads(out))
    latencies = sorted(lat for r in results for lat in r["latencies"])
    statuses: Counter[str] = Counter()
    for r in results:
        statuses.update(r["statuses"])
    requests = sum(r["requests"] for r in results)
    # Server CPU per request (warm-up and lookup prefill included on both sides of the ratio):
    # far less sensitive than req/s to other load on a shared machine.
    served = sum(r["all_requests"] for r in results)
    cpu_ms = (cpu_seconds(pid) - cpu_before) * 1000 / max(served, 1)
    return {"rps": requests / seconds, "requests": requests, "cpu_ms": cpu_ms,
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "statuses": ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--loaders", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--scenario", default="accept", help=argparse.SUPPRESS)
    parser.add_argument("--tenant", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--adapter-load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", choices=CLIENTS, default="aiohttp", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=2000,
                        help="calls per adapter measurement (the second table)")
    args = parser.parse_args()
    if args.adapter_load:
        run_adapter_load(args)
        return
    if args.serve_baseline:
        serve_baseline(args.port)
        return
    if args.load:
        run_loader(args)
        return

    print(f"machine: {machine()}; {args.connections} connections from {args.loaders} loader "
          f"processes, {args.seconds:g} s measured after {WARMUP_S:g} s warm-up, "
          f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f} at start")
    plan = [("baseline (bare uvicorn ASGI)", "baseline", "POST, 201", "accept"),
            ("mock integrator", "mock", "POST /invoices, new number (201)", "accept"),
            ("mock integrator", "mock", "POST /invoices, taken number (409)", "duplicate"),
            ("mock integrator", "mock", "GET /invoices/{t}/{n} (200)", "lookup")]
    servers: dict[str, Proc] = {}
    results: list[list[dict[str, Any]]] = [[] for _ in plan]
    adapter_runs: dict[str, list[dict[str, float]]] = {client: [] for client in CLIENTS}
    try:
        for kind in ("baseline", "mock"):
            servers[kind] = start_server(kind)
        ports = {kind: port_of(server) for kind, server in servers.items()}
        # Rounds interleave the servers, so a burst of load from elsewhere hits both alike.
        for _ in range(args.rounds):
            for index, (_label, kind, _what, scenario) in enumerate(plan):
                results[index].append(measure(ports[kind], servers[kind].pid, scenario,
                                              args.connections, args.loaders, args.seconds))
            for client in CLIENTS:
                adapter_runs[client].append(measure_adapter(ports["mock"], client,
                                                             ADAPTER_IN_FLIGHT, args.calls))
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    for (label, _kind, what, _scenario), runs in zip(plan, results, strict=True):
        rps = sorted(run["rps"] for run in runs)
        middle = sorted(runs, key=lambda run: run["rps"])[len(runs) // 2]
        rows.append([label, what, f"{middle['rps']:,.0f}", f"{rps[0]:,.0f}–{rps[-1]:,.0f}",
                     f"{middle['p50_ms']:.1f}", f"{middle['p99_ms']:.1f}",
                     f"{min(run['cpu_ms'] for run in runs):.3f}", middle["statuses"]])
    print(f"load average {os.getloadavg()[0]:.1f} at end\n")
    print_table("Mock integrator: requests per second at zero latency (higher is better)",
                ["server", "request", "req/s (median)", "range", "p50 ms", "p99 ms",
                 "server CPU ms/req (best)", "answers (median round)"], rows)
    labels = {"httpx": "httpx (16 clients of 8 connections)",
              "aiohttp": "aiohttp (HttpIntegrator, one session)"}
    adapter_rows = [[labels[client], f"{min(r['cpu_ms'] for r in runs):.3f}",
                     f"{sorted(r['rps'] for r in runs)[len(runs) // 2]:,.0f}"]
                    for client, runs in adapter_runs.items()]
    print_table(f"Integrator client: POST /invoices with {ADAPTER_IN_FLIGHT} calls in flight "
                f"against the mock, {args.calls} calls, uvloop (lower CPU is better)",
                ["client", "client CPU ms/call (best)", "calls/s (median)"], adapter_rows)


if __name__ == "__main__":
    main()
