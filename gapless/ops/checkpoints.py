"""Signed checkpoints of the chains' heads: the chain's anchor outside the database
(docs/chain.md, "Checkpoints", format ``gapless-chain-checkpoint/1``).

A checkpoint is the head (``seq``, ``hash``) of every chain, read from one snapshot and signed
with an Ed25519 key that never enters the database. Whoever rewrites a chain in the database,
however consistently (every later hash recomputed, the head moved), cannot make the record at a
signed ``seq`` carry the signed hash again, nor sign a new checkpoint without the key.

The private key is read from its file by :func:`load_private_key`, used to sign, and neither
stored, logged nor printed. Verifiers need only the public key.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from gapless.errors import GaplessError
from gapless.ledger.queries import chain as q
from gapless.ops.chain import (
    SignedHead,
    UnreadableJson,
    UnsafeFile,
    canonical_json,
    read_json,
    read_regular,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

    from gapless.ledger.database import Database

FORMAT = "gapless-chain-checkpoint/1"
#: The checkpoint files of a directory (other files there are not read).
FILE_GLOB = "checkpoint-*.json"
#: A checkpoint file larger than this is refused unread (one holds a head per chain).
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
#: The keys of one chain's head in a checkpoint, each always present.
HEAD_FIELDS = ("tenant", "series", "period_key", "last_no", "last_number", "head_seq",
               "head_hash")


class CheckpointKeyError(GaplessError):
    """A key file is missing, unreadable, or not the Ed25519 key it should be; give the right
    file (``gapless chain keygen`` makes a pair)."""


class CheckpointDirectoryError(GaplessError):
    """The checkpoints directory is missing, or holds no checkpoint file."""


class InvalidCheckpoint(GaplessError):
    """A checkpoint file that is not what the key signed: forged, edited, or not a checkpoint."""


class ChainDiverged(GaplessError):
    """A chain no longer holds the head the latest checkpoint signed: nothing is signed over
    it. Investigate (``gapless chain verify --public-key``); chains are append-only, so only a
    change made around gapless does this."""


# ----------------------------------------------------------------------------------- keys

def fingerprint(public_key: Ed25519PublicKey) -> str:
    """A key's name in checkpoints: lowercase hex SHA-256 of its 32 raw public bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_path(private_path: Path) -> Path:
    """Where ``gapless chain keygen`` puts the public key of ``private_path``: ``FILE.pub``."""
    return private_path.with_name(private_path.name + ".pub")


def generate_key_pair(private_path: Path) -> str:
    """Write a new Ed25519 key pair: the private key at ``private_path`` (PEM, PKCS8,
    unencrypted, mode 0600) and the public key at ``FILE.pub`` (PEM, SubjectPublicKeyInfo);
    returns its fingerprint. Refuses to overwrite either file (nothing is written then)."""
    public_path = public_key_path(private_path)
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise CheckpointKeyError(f"{path} exists; a key file is never overwritten")
    if not private_path.parent.is_dir():
        raise CheckpointKeyError(f"{private_path.parent} is not a directory")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_new(private_path, private_pem, 0o600)
    try:
        _write_new(public_path, public_pem, 0o644)
    except OSError:
        private_path.unlink()
        raise
    return fingerprint(key.public_key())


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` (never an existing file) with exactly ``mode``, write, fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits away from a public key's mode
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_key_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CheckpointKeyError(f"{path}: no such key file") from None
    except OSError as exc:
        raise CheckpointKeyError(f"{path}: cannot read the key file ({exc.strerror})") from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key of a PEM PKCS8 file (``gapless chain keygen``'s)."""
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # encrypted, and no password given
        raise CheckpointKeyError(f"{path}: the private key is encrypted; gapless reads an "
                                 "unencrypted PKCS8 key, kept readable only by the checkpoint "
                                 "job") from None
    except (ValueError, UnsupportedAlgorithm):
        raise CheckpointKeyError(f"{path}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointKeyError(f"{path}: a {type(key).__name__.removeprefix('_')} key, "
                                 "not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key of a PEM SubjectPublicKeyInfo file (``FILE.pub``)."""
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise CheckpointKeyError(f"{path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointKeyError(f"{path}: a {type(key).__name__.removeprefix('_')} key, "
                                 "not an Ed25519 public key")
    return key


def readable_by_others(path: Path) -> bool:
    """Whether a private key file may be read by anyone but its owner."""
    return bool(path.stat().st_mode & 0o077)


# ------------------------------------------------------------------------------ checkpoints

def utc_text(at: datetime) -> str:
    """The chain's time format: UTC, ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def checkpoint_body(heads: Iterable[Mapping[str, Any]], at: datetime,
                    key: str) -> dict[str, Any]:
    """The signed part of a checkpoint: its format, time, key fingerprint and the heads,
    sorted by (tenant, series, period_key) in code point order."""
    chains = [{name: head[name] for name in HEAD_FIELDS} for head in heads]
    chains.sort(key=lambda c: (c["tenant"], c["series"], c["period_key"]))
    return {"format": FORMAT, "at": utc_text(at), "key": key, "chains": chains}


def signed_bytes(body: Mapping[str, Any]) -> bytes:
    """What the signature is over: UTF-8 of the body's canonical JSON (docs/chain.md)."""
    return canonical_json(dict(body)).encode("utf-8")


def sign(body: Mapping[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    """The checkpoint file's object: the body and its Ed25519 signature (standard base64)."""
    signature = private_key.sign(signed_bytes(body))
    return {"checkpoint": dict(body), "signature": base64.b64encode(signature).decode("ascii")}


def file_bytes(envelope: Mapping[str, Any]) -> bytes:
    """A checkpoint file's bytes: canonical JSON of the envelope, then LF."""
    return (canonical_json(dict(envelope)) + "\n").encode("utf-8")


def file_name(at: str) -> str:
    """``checkpoint-2026-11-25T18-00-00.123456Z.json``: names sort as their times."""
    return f"checkpoint-{at.replace(':', '-')}.json"


def write_checkpoint(directory: Path, envelope: Mapping[str, Any]) -> Path:
    """Write a checkpoint into ``directory`` (created if missing) under its own name, never
    over an existing file, and never half-written: a temporary file, fsynced, then linked."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(envelope["checkpoint"]["at"])
    temporary = directory / f".{path.name}.{os.getpid()}.tmp"
    _write_new(temporary, file_bytes(envelope), 0o644)
    try:
        os.link(temporary, path)  # fails if the name exists: a checkpoint is written once
    finally:
        temporary.unlink()
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


async def read_heads(db: Database, signed: Sequence[Mapping[str, Any]] = ()
                     ) -> tuple[list[dict[str, Any]], list[str | None]]:
    """Every chain's head (and its last sealed number), and the hash each chain now has at the
    seq of each ``signed`` head (None: no such record); one snapshot, no lock."""
    probes = json.dumps([{"tenant": h["tenant"], "series": h["series"],
                          "period_key": h["period_key"], "seq": h["head_seq"]} for h in signed])
    async with db.snapshot() as snap:
        rows = [r._asdict() for r in await snap.all(q.HEADS)]
        found = {(r.tenant, r.series, r.period_key, r.seq): r.hash
                 for r in await snap.all(q.SIGNED_RECORDS, {"signed": probes})}
    heads = [{"tenant": r["tenant"], "series": r["series"], "period_key": r["period_key"],
              "last_no": r["last_no"], "last_number": r["last_number"],
              "head_seq": r["chain_seq"], "head_hash": r["chain_hash"]} for r in rows]
    return heads, [found.get((h["tenant"], h["series"], h["period_key"], h["head_seq"]))
                   for h in signed]


def latest_checkpoint(directory: Path,
                      public_key: Ed25519PublicKey) -> tuple[str, dict[str, Any]] | None:
    """The newest checkpoint of ``directory`` this key signed (file name, body); None when
    there is none (files that do not verify are left to ``gapless chain verify``)."""
    if not directory.is_dir():
        return None
    keys = {fingerprint(public_key): public_key}
    for path in reversed(checkpoint_files(directory)):
        try:
            return path.name, verified_body(read_checkpoint_file(path), keys)
        except InvalidCheckpoint:
            continue
    return None


async def take_checkpoint(db: Database, private_key: Ed25519PrivateKey,
                          directory: Path) -> tuple[Path, dict[str, Any]]:
    """Sign the heads of every chain, as read now, and write the checkpoint into
    ``directory``; returns its path and body. Its time is this machine's clock when the heads
    were read (the checkpoint job's, not the database's).

    Raises ChainDiverged, and signs nothing, when a chain no longer holds a head the latest
    checkpoint of ``directory`` signed: a rewritten chain is reported by the next scheduled
    checkpoint, not signed over."""
    previous = latest_checkpoint(directory, private_key.public_key())
    signed = previous[1]["chains"] if previous else []
    heads, now = await read_heads(db, signed)
    diverged = [h for h, hash_now in zip(signed, now, strict=True) if hash_now != h["head_hash"]]
    if previous and diverged:
        first = diverged[0]
        more = f" (and {len(diverged) - 1} more chain(s))" if len(diverged) > 1 else ""
        raise ChainDiverged(
            f"{first['tenant']}/{first['series']}/{first['period_key']}: number "
            f"{first['last_number']} ({first['last_no']}): the chain no longer matches the "
            f"checkpoint signed at {previous[1]['at']} ({previous[0]}) at seq "
            f"{first['head_seq']}{more}; nothing signed: run gapless chain verify "
            "--public-key to see it")
    body = checkpoint_body(heads, datetime.now(UTC), fingerprint(private_key.public_key()))
    return write_checkpoint(directory, sign(body, private_key)), body


# ----------------------------------------------------------------------------- verification

@dataclass
class Checkpoints:
    """The checkpoints of a directory, read against the given public keys: the heads of those
    whose signature verified, and every file refused, with why."""

    files: list[str] = field(default_factory=list)
    valid: list[dict[str, Any]] = field(default_factory=list)  # bodies, oldest first
    heads: list[SignedHead] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)

    @property
    def latest(self) -> str | None:
        return max((b["at"] for b in self.valid), default=None)


def checkpoint_files(directory: Path) -> list[Path]:
    """The checkpoint files of ``directory`` (``checkpoint-*.json``), by name (time): every
    entry of that name but a directory (a symbolic link is listed, and refused when read)."""
    if not directory.is_dir():
        raise CheckpointDirectoryError(f"{directory} is not a directory")
    with os.scandir(directory) as entries:
        return sorted(directory / e.name for e in entries
                      if fnmatch.fnmatchcase(e.name, FILE_GLOB)
                      and not e.is_dir(follow_symlinks=False))


def read_checkpoint_file(path: Path) -> bytes:
    """A checkpoint file's bytes: a regular file of at most MAX_CHECKPOINT_BYTES, never read
    through a symbolic link; raises InvalidCheckpoint."""
    try:
        return read_regular(path, MAX_CHECKPOINT_BYTES)
    except FileNotFoundError:
        raise InvalidCheckpoint("gone while it was read") from None
    except UnsafeFile as exc:
        raise InvalidCheckpoint(f"{exc}; not read") from None


def read_checkpoints(directory: Path, public_keys: Sequence[Ed25519PublicKey]) -> Checkpoints:
    """Every checkpoint file of ``directory``, each signature verified with the public key it
    names (one of ``public_keys``). Raises CheckpointDirectoryError when there is none: a
    verification against no checkpoint would prove nothing."""
    paths = checkpoint_files(directory)
    if not paths:
        raise CheckpointDirectoryError(f"{directory} holds no checkpoint ({FILE_GLOB})")
    keys = {fingerprint(k): k for k in public_keys}
    found = Checkpoints(files=[p.name for p in paths])
    for path in paths:
        try:
            body = verified_body(read_checkpoint_file(path), keys)
        except InvalidCheckpoint as exc:
            found.invalid.append((path.name, str(exc)))
            continue
        found.valid.append(body)
        found.heads.extend(SignedHead(path.name, body["at"], **{
            name: chain[name] for name in HEAD_FIELDS}) for chain in body["chains"])
    found.valid.sort(key=lambda b: str(b["at"]))
    return found


def verified_body(data: bytes, keys: Mapping[str, Ed25519PublicKey]) -> dict[str, Any]:
    """The body of a checkpoint file whose signature verifies with the key it names."""
    try:
        envelope = read_json(data)  # bounded: depth, numbers, surrogates
    except UnreadableJson as exc:
        why = str(exc)
        raise InvalidCheckpoint("not JSON" if why.startswith("not ") else f"not JSON: {why}"
                                ) from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("checkpoint"), dict) \
            or not isinstance(envelope.get("signature"), str):
        raise InvalidCheckpoint("not a checkpoint (no checkpoint object and signature)")
    body = envelope["checkpoint"]
    if body.get("format") != FORMAT:
        raise InvalidCheckpoint(f"not a {FORMAT} checkpoint (format {body.get('format')!r})")
    key = keys.get(str(body.get("key")))
    if key is None:
        raise InvalidCheckpoint(f"signed by key {str(body.get('key'))[:16]}…, not by the "
                                "public key given: refused")
    try:
        signature = base64.b64decode(envelope["signature"], validate=True)
        key.verify(signature, signed_bytes(body))
    except (binascii.Error, InvalidSignature):
        raise InvalidCheckpoint("the signature does not verify with the public key: forged, "
                                "or changed after signing") from None
    if not _well_formed(body):
        raise InvalidCheckpoint("signed, but its chains are not well formed")
    return dict(body)


def _well_formed(body: Mapping[str, Any]) -> bool:
    """Every head has its keys, each of its exact type (a boolean is not an integer)."""
    kinds: dict[str, tuple[type, ...]] = {
        "tenant": (str,), "series": (str,), "period_key": (str,), "last_no": (int,),
        "last_number": (str, type(None)), "head_seq": (int,), "head_hash": (str,)}
    chains = body.get("chains")
    return isinstance(body.get("at"), str) and isinstance(chains, list) and all(
        isinstance(c, dict) and all(type(c.get(k)) in t for k, t in kinds.items())
        for c in chains)
