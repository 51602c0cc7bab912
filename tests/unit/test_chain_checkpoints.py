"""Checkpoints without a database: key files (made, refused, read), checkpoint files (forged,
edited, another key's), a chain against the heads signed for it (grown, rewritten, shorter,
missing), and the command line's usage errors (one line, exit 2, before any database)."""

from __future__ import annotations

import base64
import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gapless.ops.chain import genesis, record_hash, verify_all
from gapless.ops.checkpoints import (
    CheckpointDirectoryError,
    CheckpointKeyError,
    InvalidCheckpoint,
    checkpoint_body,
    file_bytes,
    fingerprint,
    generate_key_pair,
    load_private_key,
    load_public_key,
    read_checkpoints,
    sign,
    verified_body,
    write_checkpoint,
)
from tests.helpers import run_gapless

ENV = {"PATH": "/usr/bin:/bin", "GAPLESS_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}
T0 = datetime(2026, 11, 25, 18, tzinfo=UTC)


# ------------------------------------------------------------------ a chain, built in memory

def seal(seq: int, no: int, at: str = "2026-11-25T09:00:00.000000Z") -> dict[str, Any]:
    """A seal record of a number taken by next_number() (no invoice)."""
    return {"seq": seq, "kind": "seal", "tenant": "acme", "series": "ABC", "period_key": "2026",
            "reserved_no": no, "number": f"ABC2026{no:09d}", "invoice_id": None, "uuid": None,
            "message_sha256": None, "document_sha256": None, "ref": None, "reason": None,
            "at": at, "migrated": False, "version": "gapless-chain/1"}


def hashed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with every hash (re)computed, as an attacker without the key would."""
    prev = genesis("acme", "ABC", "2026")
    out = []
    for r in records:
        prev = record_hash("gapless-chain/1", prev, r)
        out.append({**r, "hash": prev})
    return out


def chain(n: int) -> list[dict[str, Any]]:
    return hashed([seal(k, k) for k in range(1, n + 1)])


def counter(records: list[dict[str, Any]]) -> dict[str, Any]:
    last = records[-1] if records else None
    return {"tenant": "acme", "series": "ABC", "period_key": "2026",
            "last_no": last["reserved_no"] if last else 0,
            "chain_seq": last["seq"] if last else 0, "chain_hash": last["hash"] if last else None}


def head_row(records: list[dict[str, Any]]) -> dict[str, Any]:
    last = records[-1]
    return {"tenant": "acme", "series": "ABC", "period_key": "2026",
            "last_no": last["reserved_no"], "last_number": last["number"],
            "head_seq": last["seq"], "head_hash": last["hash"]}


def checkpoint_of(directory: Path, records: list[dict[str, Any]], key: Ed25519PrivateKey,
                  at: datetime) -> Path:
    body = checkpoint_body([head_row(records)], at, fingerprint(key.public_key()))
    return write_checkpoint(directory, sign(body, key))


def verify(records: list[dict[str, Any]], directory: Path,
           key: Ed25519PrivateKey) -> tuple[Any, Any]:
    signed = read_checkpoints(directory, [key.public_key()])
    counters = [counter(records)] if records else []
    return verify_all(counters, records, [], {}, signed.heads), signed


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


# ------------------------------------------------------------------------------ the chain

def test_a_grown_chain_matches_every_earlier_checkpoint(tmp_path: Path,
                                                        key: Ed25519PrivateKey) -> None:
    checkpoint_of(tmp_path, chain(3), key, T0)
    latest = checkpoint_of(tmp_path, chain(5), key, T0 + timedelta(days=1))
    [report], signed = verify(chain(8), tmp_path, key)
    assert report.ok, report.checkpoint_reason
    assert report.anchor is not None
    assert (report.anchor.checkpoint, report.anchor.head_seq) == (latest.name, 5)
    assert (len(signed.valid), signed.invalid) == (2, [])


def test_a_chain_rewritten_consistently_passes_alone_and_fails_against_the_checkpoints(
        tmp_path: Path, key: Ed25519PrivateKey) -> None:
    first = checkpoint_of(tmp_path, chain(3), key, T0)
    second = checkpoint_of(tmp_path, chain(6), key, T0 + timedelta(days=1))
    rewritten = chain(8)
    rewritten[4] = {**rewritten[4], "at": "2026-11-24T00:00:00.000000Z"}  # number 5
    rewritten = hashed(rewritten)
    [alone] = verify_all([counter(rewritten)], rewritten, [], {})
    assert alone.ok  # the hashes agree with each other and the head: only the anchor can tell
    [report], _ = verify(rewritten, tmp_path, key)
    assert not report.ok
    assert report.reason is None
    assert (report.checkpoint_no, report.checkpoint_number) == (6, "ABC2026000000006")
    assert report.checkpoint_reason is not None
    assert report.checkpoint_reason.startswith(
        f"the chain no longer matches the checkpoint signed at 2026-11-26T18:00:00.000000Z "
        f"({second.name}): its record seq 6 hashes to ")
    assert ("the checkpoint signed at 2026-11-25T18:00:00.000000Z still matches up to seq 3 "
            "(number ABC2026000000003), so the change is after it") in report.checkpoint_reason
    assert report.anchor is not None
    assert report.anchor.checkpoint == first.name


def test_a_chain_shorter_than_a_signed_head_fails(tmp_path: Path,
                                                  key: Ed25519PrivateKey) -> None:
    checkpoint_of(tmp_path, chain(5), key, T0)
    [report], _ = verify(chain(3), tmp_path, key)  # numbers 4 and 5 removed, head moved back
    assert report.reason is None
    assert report.checkpoint_no == 5
    assert report.checkpoint_reason is not None
    assert "the chain is shorter than the checkpoint signed at 2026-11-25T18:00:00.000000Z" in \
        report.checkpoint_reason
    assert "it ends at seq 3, the checkpoint signed seq 5: records removed" in \
        report.checkpoint_reason


def test_a_chain_removed_altogether_fails(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    checkpoint_of(tmp_path, chain(2), key, T0)
    [report], _ = verify([], tmp_path, key)
    assert (report.tenant, report.series, report.period_key) == ("acme", "ABC", "2026")
    assert (report.ok, report.checkpoint_number) == (False, "ABC2026000000002")
    assert report.checkpoint_reason is not None
    assert report.checkpoint_reason.startswith("the chain is missing")


# ----------------------------------------------------------------------- checkpoint files

def test_a_checkpoint_changed_after_signing_is_refused(tmp_path: Path,
                                                       key: Ed25519PrivateKey) -> None:
    path = checkpoint_of(tmp_path, chain(3), key, T0)
    envelope = json.loads(path.read_text())
    envelope["checkpoint"]["chains"][0]["head_hash"] = chain(4)[2]["hash"][::-1]
    path.write_text(json.dumps(envelope, indent=2))
    [report], signed = verify(chain(3), tmp_path, key)
    assert report.anchor is None  # nothing is taken from a refused file
    assert signed.invalid == [(path.name, "the signature does not verify with the public "
                               "key: forged, or changed after signing")]


def test_reformatting_a_checkpoint_changes_nothing(tmp_path: Path,
                                                   key: Ed25519PrivateKey) -> None:
    path = checkpoint_of(tmp_path, chain(3), key, T0)
    path.write_text(json.dumps(json.loads(path.read_text()), indent=4) + "\n\n")
    [report], signed = verify(chain(3), tmp_path, key)
    assert (report.ok, signed.invalid) == (True, [])


def test_a_checkpoint_of_another_key_is_refused(tmp_path: Path,
                                                key: Ed25519PrivateKey) -> None:
    mallory = Ed25519PrivateKey.generate()
    checkpoint_of(tmp_path, chain(3), mallory, T0)  # names its own key
    body = checkpoint_body([head_row(chain(3))], T0 + timedelta(seconds=1),
                           fingerprint(key.public_key()))  # names ours, signed by another
    forged = write_checkpoint(tmp_path, {**sign(body, mallory)})
    _, signed = verify(chain(3), tmp_path, key)
    why = dict(signed.invalid)
    assert len(why) == 2
    assert why[forged.name] == ("the signature does not verify with the public key: forged, "
                                "or changed after signing")
    assert next(w for n, w in why.items() if n != forged.name).startswith(
        f"signed by key {fingerprint(mallory.public_key())[:16]}…, not by the public key "
        "given: refused")


def test_checkpoints_of_a_rotated_key_verify_with_both_public_keys(
        tmp_path: Path, key: Ed25519PrivateKey) -> None:
    newer = Ed25519PrivateKey.generate()
    old = checkpoint_of(tmp_path, chain(2), key, T0)
    checkpoint_of(tmp_path, chain(4), newer, T0 + timedelta(days=1))
    both = read_checkpoints(tmp_path, [newer.public_key(), key.public_key()])
    assert (len(both.valid), both.invalid) == (2, [])
    assert [h.head_seq for h in both.heads] == [2, 4]
    only_newer = read_checkpoints(tmp_path, [newer.public_key()])
    assert [name for name, _ in only_newer.invalid] == [old.name]


@pytest.mark.parametrize(("data", "why"), [
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a checkpoint (no checkpoint object and signature)"),
    (b'{"checkpoint": {"format": "other/1"}, "signature": ""}',
     "not a gapless-chain-checkpoint/1 checkpoint (format 'other/1')"),
])
def test_what_is_not_a_checkpoint_is_refused(data: bytes, why: str,
                                             key: Ed25519PrivateKey) -> None:
    with pytest.raises(InvalidCheckpoint, match=f"^{why.replace('(', '.').replace(')', '.')}$"):
        verified_body(data, {fingerprint(key.public_key()): key.public_key()})


def test_a_signature_that_is_not_base64_is_refused(key: Ed25519PrivateKey) -> None:
    envelope = sign(checkpoint_body([], T0, fingerprint(key.public_key())), key)
    envelope["signature"] = "not base64!"
    with pytest.raises(InvalidCheckpoint, match="does not verify"):
        verified_body(file_bytes(envelope), {fingerprint(key.public_key()): key.public_key()})


def test_a_checkpoint_is_written_once(tmp_path: Path, key: Ed25519PrivateKey) -> None:
    body = checkpoint_body([head_row(chain(1))], T0, fingerprint(key.public_key()))
    path = write_checkpoint(tmp_path / "new", sign(body, key))
    with pytest.raises(FileExistsError):
        write_checkpoint(tmp_path / "new", sign(body, key))
    assert [p.name for p in (tmp_path / "new").iterdir()] == [path.name]  # no temporary left
    assert base64.b64decode(json.loads(path.read_text())["signature"], validate=True)


def test_a_directory_without_checkpoints_proves_nothing(tmp_path: Path,
                                                        key: Ed25519PrivateKey) -> None:
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(CheckpointDirectoryError, match="holds no checkpoint"):
        read_checkpoints(tmp_path, [key.public_key()])
    with pytest.raises(CheckpointDirectoryError, match="is not a directory"):
        read_checkpoints(tmp_path / "absent", [key.public_key()])


# ------------------------------------------------------------------------------ key files

def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(
        tmp_path: Path) -> None:
    private = tmp_path / "chain.key"
    name = generate_key_pair(private)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    public = tmp_path / "chain.key.pub"
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    assert fingerprint(load_private_key(private).public_key()) == name
    assert fingerprint(load_public_key(public)) == name
    before = private.read_bytes()
    with pytest.raises(CheckpointKeyError, match="exists; a key file is never overwritten"):
        generate_key_pair(private)
    public.unlink()
    with pytest.raises(CheckpointKeyError, match="exists"):
        generate_key_pair(private)  # the private key alone is enough to refuse
    assert private.read_bytes() == before
    assert not public.exists()


def test_key_files_that_are_not_ed25519_keys_are_refused(tmp_path: Path) -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.pem").write_bytes(ec_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp_path / "ec.pub").write_bytes(ec_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    ed = Ed25519PrivateKey.generate()
    (tmp_path / "locked.pem").write_bytes(ed.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    (tmp_path / "garbage").write_text("hello")
    generate_key_pair(tmp_path / "ok.key")
    cases = [
        (load_private_key, "absent", "no such key file"),
        (load_private_key, "garbage", "not a PEM private key"),
        (load_private_key, "ok.key.pub", "not a PEM private key"),
        (load_private_key, "ec.pem", "not an Ed25519 private key"),
        (load_private_key, "locked.pem", "the private key is encrypted"),
        (load_public_key, "ok.key", "not a PEM public key"),
        (load_public_key, "ec.pub", "not an Ed25519 public key"),
        (load_public_key, "", "cannot read the key file"),  # a directory
    ]
    for load, name, why in cases:
        with pytest.raises(CheckpointKeyError, match=why):
            load(tmp_path / name)


# ---------------------------------------------------------------------- the command line

def usage_error(args: list[str], env: dict[str, str] | None = None) -> str:
    result = run_gapless(args, {**ENV, **(env or {})}, timeout=60)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gapless: error")
    return lines[0]


def test_bad_arguments_are_one_line_and_exit_2_before_any_database(tmp_path: Path) -> None:
    generate_key_pair(tmp_path / "chain.key")
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk.pem").write_text("junk")
    key, pub = str(tmp_path / "chain.key"), str(tmp_path / "chain.key.pub")
    assert "exists; a key file is never overwritten" in usage_error(
        ["chain", "keygen", "--out", key])
    assert "is not a directory" in usage_error(
        ["chain", "keygen", "--out", str(tmp_path / "no" / "chain.key")])
    assert "no such key file" in usage_error(
        ["chain", "checkpoint", "--key", str(tmp_path / "absent"), "--out", str(tmp_path)])
    assert "not a PEM private key" in usage_error(
        ["chain", "checkpoint", "--key", pub, "--out", str(tmp_path)])
    assert "--out DIR or GAPLESS_CHAIN_CHECKPOINTS" in usage_error(
        ["chain", "checkpoint", "--key", key])
    assert "not a PEM public key" in usage_error(
        ["chain", "verify", "--public-key", str(tmp_path / "junk.pem"), "--checkpoints",
         str(tmp_path)])
    assert "needs the checkpoints to check" in usage_error(["chain", "verify", "--public-key", pub])
    assert "needs the public key" in usage_error(
        ["chain", "verify", "--checkpoints", str(tmp_path / "empty")])
    assert "holds no checkpoint" in usage_error(
        ["chain", "verify", "--public-key", pub, "--checkpoints", str(tmp_path / "empty")])
    assert "holds no checkpoint" in usage_error(
        ["chain", "verify", "--public-key", pub],
        {"GAPLESS_CHAIN_CHECKPOINTS": str(tmp_path / "empty")})
    assert "is not a directory" in usage_error(
        ["audit", "--public-key", pub, "--checkpoints", str(tmp_path / "absent")])
    assert "is not a directory" in usage_error(
        ["chain", "export", "--out", str(tmp_path / "x"), "--checkpoints",
         str(tmp_path / "absent")])
    assert not (tmp_path / "x").exists()


def test_keygen_on_the_command_line(tmp_path: Path) -> None:
    result = run_gapless(["chain", "keygen", "--out", str(tmp_path / "k")], ENV, timeout=60)
    assert result.returncode == 0, result.stderr
    name = fingerprint(load_public_key(tmp_path / "k.pub"))
    assert result.stdout.startswith(f"chain: key {name}: private key {tmp_path / 'k'}")
    assert "BEGIN" not in result.stdout + result.stderr  # the key itself is never printed
