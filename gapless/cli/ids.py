"""``gapless id decode | encode``: cluster-encoded ids (cluster_id << 48 | local)."""

from __future__ import annotations

import typer

from gapless.cli.printable import echo
from gapless.ids import decode_id, encode_id

id_app = typer.Typer(help="Cluster-encoded ids: cluster_id << 48 | local.", no_args_is_help=True)


@id_app.command("decode")
def id_decode(value: str = typer.Argument(..., help="A 64-bit gapless id.")) -> None:
    """Print the cluster and the local part of an id."""
    try:
        decoded = decode_id(int(value))
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not a gapless id ({exc})") from None
    echo(f"id {int(value)}: cluster {decoded.cluster_id}, local {decoded.local}")


@id_app.command("encode")
def id_encode(cluster_id: int = typer.Argument(...), local: int = typer.Argument(...)) -> None:
    """Compose an id from a cluster id and a local part."""
    try:
        echo(str(encode_id(cluster_id, local)))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def register(app: typer.Typer) -> None:
    app.add_typer(id_app, name="id")
