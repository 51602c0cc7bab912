"""``gapless chain``: the tamper-evident chain of every counter (docs/chain.md).

``gapless chain verify`` recomputes every record from the database (or, given a directory, from
an export, with no database) and exits 1 naming the first broken number; ``gapless chain export
--out DIR`` writes the chains with the stored messages and documents. ``gapless chain keygen``
makes an Ed25519 key pair, ``gapless chain checkpoint --key FILE`` signs every chain's head with
it, and ``verify --public-key PUB --checkpoints DIR`` checks the chains against those signed
heads too: the anchor outside the database.

Exit codes: 0 verified, 1 broken (a chain, a checkpoint it no longer matches, a checkpoint
file that is not what the key signed, or an export that is not what ``chain export`` writes:
"malformed export: ..."), 2 bad arguments (a key file missing, unreadable or of the wrong type,
no checkpoint where one was asked for, an export directory that is not new and empty).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from gapless.cli.options import DatabaseUrlOption, run, settings_from
from gapless.cli.printable import console as text_console
from gapless.cli.printable import echo, plain, printable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from gapless.ops.chain import ChainReport
    from gapless.ops.checkpoints import Checkpoints

chain_app = typer.Typer(help="The tamper-evident chain of every series (docs/chain.md).",
                        no_args_is_help=True)


PublicKeyOption = typer.Option(
    None, "--public-key", metavar="PUB",
    help="Public key (PEM, FILE.pub of gapless chain keygen) the checkpoints are signed with; "
         "repeat it for checkpoints of an older key.")
CheckpointsOption = typer.Option(
    None, "--checkpoints", metavar="CKDIR",
    help="Directory of signed checkpoints (default: GAPLESS_CHAIN_CHECKPOINTS; for an export, "
         "its own checkpoints/).")


@chain_app.command("verify")
def verify(
    directory: Path | None = typer.Argument(
        None, help="An export (gapless chain export --out DIR): verify it with no database."),
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant."),
    series: str | None = typer.Option(None, "--series", help="Only this series code."),
    public_key: list[Path] | None = PublicKeyOption,
    checkpoints: Path | None = CheckpointsOption,
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Recompute every chain (in the database, or in an export), and check it against signed
    checkpoints when given; exit 1 naming the first broken number."""
    if directory is not None:
        from gapless.ops.chain import export_checkpoints, verify_export

        if not directory.is_dir() or not os.path.lexists(directory / "manifest.json"):
            raise typer.BadParameter(f"{directory} holds no manifest.json", param_hint="DIR")
        if checkpoints is None and public_key:
            checkpoints = export_checkpoints(directory)  # never through a symbolic link
        signed = load_checkpoints(public_key, checkpoints, setting=None)
        reports = [r for r in verify_export(directory, signed.heads if signed else (),
                                            tenant=tenant, series=series)
                   if (tenant is None or r.tenant == tenant)
                   and (series is None or r.series == series)]
    else:
        settings = settings_from(database_url=database_url)
        signed = load_checkpoints(public_key, checkpoints, setting=settings.chain_checkpoints)
        reports = run(_verify(settings.database_url, tenant, series, signed))
    _print(reports, signed)
    if not all(r.ok for r in reports) or (signed is not None and signed.invalid):
        raise typer.Exit(1)


def load_checkpoints(public_keys: list[Path] | None, directory: Path | None, *,
                     setting: str | None) -> Checkpoints | None:
    """The checkpoints of ``directory`` (else of the ``GAPLESS_CHAIN_CHECKPOINTS`` setting),
    read against ``public_keys``; None when neither a key nor a directory is given. A key or a
    directory without the other, a key file that is not an Ed25519 public key, or a directory
    with no checkpoint is a usage error (exit 2)."""
    from gapless.ops.checkpoints import (
        CheckpointDirectoryError,
        CheckpointKeyError,
        load_public_key,
        read_checkpoints,
    )

    if directory is None and public_keys and setting:
        directory = Path(setting)
    if not public_keys and directory is None:
        return None
    if not public_keys:
        raise typer.BadParameter("checking checkpoints needs the public key they are signed "
                                 "with (--public-key PUB)")
    if directory is None:
        raise typer.BadParameter("--public-key needs the checkpoints to check: --checkpoints "
                                 "CKDIR or GAPLESS_CHAIN_CHECKPOINTS")
    try:
        keys = [load_public_key(path) for path in public_keys]
    except CheckpointKeyError as exc:
        raise typer.BadParameter(str(exc), param_hint="--public-key") from None
    try:
        return read_checkpoints(directory, keys)
    except CheckpointDirectoryError as exc:
        raise typer.BadParameter(str(exc), param_hint="--checkpoints") from None


@chain_app.command("export")
def export(
    out: Path = typer.Option(
        ..., "--out", help="A new directory to write (created, mode 0700; an existing one only "
                           "if empty). Its files are 0600: they hold tax ids."),
    tenant: str | None = typer.Option(None, "--tenant", help="Only this tenant."),
    series: str | None = typer.Option(None, "--series", help="Only this series code."),
    checkpoints: Path | None = typer.Option(
        None, "--checkpoints", metavar="CKDIR",
        help="Copy these signed checkpoints into DIR/checkpoints (default: "
             "GAPLESS_CHAIN_CHECKPOINTS, when set)."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Write every chain with its invoices' messages and documents to DIR (one snapshot), and
    the signed checkpoints, so that the export and the public key are all an auditor needs."""
    from gapless.ops.chain import ExportDirectoryError, new_export_directory
    from gapless.ops.checkpoints import (
        CheckpointDirectoryError,
        InvalidCheckpoint,
        checkpoint_files,
        read_checkpoint_file,
    )

    settings = settings_from(database_url=database_url)
    source = checkpoints or (Path(settings.chain_checkpoints) if settings.chain_checkpoints
                             else None)
    try:
        files = [(path.name, read_checkpoint_file(path))
                 for path in (checkpoint_files(source) if source is not None else [])]
    except CheckpointDirectoryError as exc:
        raise typer.BadParameter(str(exc), param_hint="--checkpoints") from None
    except InvalidCheckpoint as exc:
        raise typer.BadParameter(f"a checkpoint file: {exc}", param_hint="--checkpoints"
                                 ) from None
    try:
        directory = new_export_directory(out)
    except ExportDirectoryError as exc:
        raise typer.BadParameter(str(exc), param_hint="--out") from None
    try:
        manifest = run(_export(settings.database_url, directory, tenant, series, files))
    finally:
        os.close(directory)
    echo(f"chain: exported {len(manifest['chains'])} chain(s) and {len(files)} "
               f"checkpoint(s) to {out}")


@chain_app.command("keygen")
def keygen(
    out: Path = typer.Option(
        ..., "--out", metavar="FILE",
        help="The private key file to write (PEM PKCS8, mode 0600); the public key goes to "
             "FILE.pub. Neither is ever overwritten."),
) -> None:
    """Make the Ed25519 key pair that signs checkpoints. Keep FILE on the machine that runs
    the checkpoint job, off the database host and its backups; give FILE.pub to auditors."""
    from gapless.ops.checkpoints import CheckpointKeyError, generate_key_pair, public_key_path

    try:
        name = generate_key_pair(out)
    except CheckpointKeyError as exc:
        raise typer.BadParameter(str(exc), param_hint="--out") from None
    echo(f"chain: key {name}: private key {out} (mode 0600), public key "
               f"{public_key_path(out)}")


@chain_app.command("checkpoint")
def checkpoint(
    key: Path = typer.Option(..., "--key", metavar="FILE",
                             help="The private key (gapless chain keygen); read, never stored."),
    out: Path | None = typer.Option(
        None, "--out", metavar="DIR",
        help="Directory to write the checkpoint into (default: GAPLESS_CHAIN_CHECKPOINTS)."),
    database_url: str | None = DatabaseUrlOption,
) -> None:
    """Sign the head of every chain (every tenant, series and period) and write the
    checkpoint to DIR; run it on a schedule, from a machine that is not the database's. Exit 1,
    signing nothing, when a chain no longer holds a head DIR's latest checkpoint signed."""
    from gapless.ops.checkpoints import (
        CheckpointKeyError,
        fingerprint,
        load_private_key,
        readable_by_others,
    )

    settings = settings_from(database_url=database_url)
    directory = out or (Path(settings.chain_checkpoints) if settings.chain_checkpoints else None)
    if directory is None:
        raise typer.BadParameter("where to write the checkpoint: --out DIR or "
                                 "GAPLESS_CHAIN_CHECKPOINTS", param_hint="--out")
    try:
        private_key = load_private_key(key)
    except CheckpointKeyError as exc:
        raise typer.BadParameter(str(exc), param_hint="--key") from None
    if readable_by_others(key):
        echo(f"gapless: warning: {key} is readable by others than its owner; keep the "
                   "private key readable only by the checkpoint job (chmod 600)", err=True)
    path, body = run(_checkpoint(settings.database_url, private_key, directory))
    echo(f"chain: checkpoint {path}: {len(body['chains'])} chain head(s) signed at "
               f"{body['at']} with key {fingerprint(private_key.public_key())[:16]}")


async def _checkpoint(url: str, private_key: Ed25519PrivateKey,
                      directory: Path) -> tuple[Path, dict[str, Any]]:
    from gapless.ledger.database import short_lived
    from gapless.ops.checkpoints import take_checkpoint

    async with short_lived(url, actor="chain") as db:
        return await take_checkpoint(db, private_key, directory)


async def _export(url: str, out: int, tenant: str | None, series: str | None,
                  checkpoints: list[tuple[str, bytes]]) -> dict[str, Any]:
    from gapless.ledger.database import short_lived
    from gapless.ops.chain import export as export_chains

    async with short_lived(url, actor="chain") as db:
        return await export_chains(db, out, tenant=tenant, series=series,
                                   checkpoints=checkpoints)


async def _verify(url: str, tenant: str | None, series: str | None,
                  signed: Checkpoints | None) -> list[ChainReport]:
    from gapless.ledger.database import short_lived
    from gapless.ops.chain import verify as verify_chains

    async with short_lived(url, actor="chain") as db:
        return await verify_chains(db, tenant=tenant, series=series,
                                   heads=signed.heads if signed else ())


#: A finding is one line, whatever its length, printed as it is (no markup).
_LINE: dict[str, Any] = {"soft_wrap": True, "markup": False}


def _shown(text: str) -> str:
    """Data (from the database or an export) as one printable line: controls, bidirectional
    marks and the Unicode line and paragraph separators written as escapes."""
    return printable(text).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _number(number: str | None, no: int | None) -> str:
    """``number ABC2026000000017 (17)``; the counter value alone where nothing prints it."""
    if number is not None:
        return f"number {_shown(number)} ({no})"
    return f"number ({no}; printed nowhere in the chain)"


def _print(reports: list[ChainReport], signed: Checkpoints | None) -> None:
    console = text_console(width=200)
    table = Table(title=f"chains ({len(reports)})", title_justify="left")
    columns = ["tenant", "series", "period", "first", "last", "head", "seals", "issued",
               "rejected", "voided", "corrected", "migrated"]
    for name in (*columns, "checkpoint") if signed is not None else columns:
        table.add_column(name, overflow="fold")
    for r in reports:
        head = f"{r.head_seq}:{(r.head_hash or '-')[:16]}"
        row = [r.tenant, r.series, r.period_key, r.first_number or "-", r.last_number or "-",
               head, *(str(r.counts[k]) for k in ("seal", "issued", "rejected", "voided",
                                                   "corrected", "migrated"))]
        if signed is not None:
            row.append(f"{r.anchor.at} (seq {r.anchor.head_seq})" if r.anchor else "-")
        table.add_row(*(plain(_shown(cell)) for cell in row))
    console.print(table)
    broken = [r for r in reports if not r.ok]
    for r in broken:
        where = _shown(f"{r.tenant}/{r.series}/{r.period_key}")
        if r.reason is not None:
            what = (_number(r.broken_number, r.broken_no) if r.broken_no is not None
                    else "the chain")
            console.print(f"chain: BROKEN {where}: {what}: {_shown(r.reason)}", **_LINE)
        if r.checkpoint_reason is not None:
            what = (_number(r.checkpoint_number, r.checkpoint_no)
                    if r.checkpoint_number is not None or r.checkpoint_no else "the chain")
            console.print(f"chain: BROKEN {where}: {what}: {_shown(r.checkpoint_reason)}",
                          **_LINE)
    if signed is not None:
        for name, why in signed.invalid:
            console.print(f"checkpoint: INVALID {_shown(name)}: {_shown(why)}", **_LINE)
        console.print(f"checkpoints: {len(signed.valid)} of {len(signed.files)} verified "
                      f"with the public key, the latest signed at {signed.latest or '-'}")
    if not broken and not (signed is not None and signed.invalid):
        console.print(f"chain: verified, {len(reports)} chain(s), "
                      f"{sum(r.counts['seal'] for r in reports)} sealed number(s)"
                      + (f", {sum(r.anchor is not None for r in reports)} matching a signed "
                         "checkpoint" if signed is not None else ""))


def register(app: typer.Typer) -> None:
    app.add_typer(chain_app, name="chain")
