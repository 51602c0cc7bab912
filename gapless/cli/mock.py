"""``gapless mock-integrator``: the integrator stand-in for tests, benchmarks and the demo."""

from __future__ import annotations

import typer


def parse_latency(value: str) -> tuple[float, float]:
    """``MIN-MAX`` (or one number for a fixed latency) in milliseconds."""
    low_text, sep, high_text = value.partition("-")
    try:
        low = float(low_text)
        high = float(high_text) if sep else low
    except ValueError:
        raise typer.BadParameter(
            f"--latency-ms must be MIN-MAX in milliseconds, e.g. 5-50, got {value!r}") from None
    if low < 0 or high < low:
        raise typer.BadParameter(f"--latency-ms needs 0 <= MIN <= MAX, got {value!r}")
    return low, high


def mock_integrator(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8085, "--port", help="Port to listen on."),
    latency_ms: str = typer.Option("0-0", "--latency-ms", metavar="MIN-MAX",
                                   help="Latency of every call, uniform in the range (ms)."),
    transient_rate: float = typer.Option(0.0, "--transient-rate",
                                         help="Share of calls answered 503 (0..1)."),
    reject_rate: float = typer.Option(0.0, "--reject-rate",
                                      help="Share of sends rejected 422 with a reason (0..1)."),
    lost_response_rate: float = typer.Option(
        0.0, "--lost-response-rate",
        help="Share of sends accepted and recorded whose answer is then lost (0..1)."),
    lost_response_mode: str = typer.Option(
        "500", "--lost-response-mode", help="How an answer is lost: 500 | drop | timeout | mixed."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the fault draws (replayable)."),
) -> None:
    """Run the mock integrator (ledger, lookups, run-time faults) until SIGINT/SIGTERM."""
    from pydantic import ValidationError

    from gapless.cli.options import settings_from
    from gapless.integrator.mock.server import run_mock_integrator
    from gapless.integrator.mock.state import Faults

    if not 0 < port < 65536:
        raise typer.BadParameter(f"--port must be 1..65535, got {port}")
    try:
        faults = Faults(latency_ms=parse_latency(latency_ms), transient_rate=transient_rate,
                        reject_rate=reject_rate, lost_response_rate=lost_response_rate,
                        lost_response_mode=lost_response_mode)
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + "-".join(str(part) for part in first["loc"]).replace("_", "-")
        raise typer.BadParameter(f"{flag}: {first['msg']}") from None
    settings_from()  # configures logging from GAPLESS_LOG_FORMAT / GAPLESS_LOG_LEVEL
    run_mock_integrator(host, port, faults, seed)


def register(app: typer.Typer) -> None:
    app.command("mock-integrator")(mock_integrator)
