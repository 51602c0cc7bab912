"""``gapless worker``: consume invoice messages and issue them just in time."""

from __future__ import annotations

import typer

from gapless.cli.options import (
    AmqpUrlOption,
    ClusterIdOption,
    DatabaseUrlOption,
    IntegratorUrlOption,
    QueueOption,
    run,
    settings_from,
)


def worker(
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=1000,
                                    help="Deliveries in flight (also the prefetch count)."),
    shutdown_timeout: float = typer.Option(
        30.0, "--shutdown-timeout", min=0,
        help="On SIGTERM/SIGINT, seconds to finish in-flight work before the rest is left "
             "unacked for redelivery."),
    metrics_port: int | None = typer.Option(None, "--metrics-port", min=1, max=65535,
                                            help="Serve /metrics, /healthz, /readyz here."),
    metrics_host: str | None = typer.Option(
        None, "--metrics-host",
        help="Overrides GAPLESS_METRICS_HOST (127.0.0.1): the interface /metrics listens on "
             "(0.0.0.0: every interface)."),
    database_url: str | None = DatabaseUrlOption,
    amqp_url: str | None = AmqpUrlOption,
    queue: str | None = QueueOption,
    integrator_url: str | None = IntegratorUrlOption,
    cluster_id: int | None = ClusterIdOption,
) -> None:
    """Run a consumer; SIGTERM drains in-flight work, then exits 0."""
    settings = settings_from(database_url=database_url, amqp_url=amqp_url, queue=queue,
                             integrator_url=integrator_url, cluster_id=cluster_id,
                             metrics_host=metrics_host)
    from gapless.worker.consumer import Worker

    # The Worker loads GAPLESS_WORKER_HOOKS (tests) as it is made: a bad setting stops us here.
    run(Worker(settings, concurrency=concurrency, shutdown_timeout=shutdown_timeout,
               metrics_port=metrics_port).run())


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)
