"""The chain's export and its offline verification on hostile input (docs/chain.md, "Export"),
and the chain checks a deleted invoice or a removed record must fail.

A small real chain is sealed by SQL (the seals, final records and documents are the database's
own), exported with ``gapless chain export`` and verified with ``gapless chain verify DIR`` as
subprocesses under an address-space limit of 1 GiB. Each hostile export — traversal names,
symbolic links out of the directory, claims of ten billion numbers, files of unbounded size,
malformed and reordered lines — ends in exit 1 with one line (``malformed export: …``) or the
chain's failure, never a traceback, never exit 0; and a sentinel file outside the directory,
watched with inotify, is never opened.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gapless.settings import Settings, process_environment
from tests.conftest import RUN_ID, create_database, database_url, drop_database
from tests.helpers import ROOT, run_gapless

pytestmark = pytest.mark.timeout(300)

OFFLINE = "postgresql://nobody@127.0.0.1:1/none"
SEPARATORS = "line\u2028para\u2029next\u0085end"
EXACT = "0.1000000000000000055511151231257827"
MEMORY = 1 << 30


# ------------------------------------------------------------------ a small real chain

def seal(conn: psycopg.Connection[Any], invoice_id: str, payload: str) -> int:
    conn.execute("INSERT INTO invoices (invoice_id, tenant, series, payload) "
                 "VALUES (%s, 'acme', 'ABC', %s::jsonb)", (invoice_id, payload))
    conn.execute("SELECT * FROM reserve_number(%s)", (invoice_id,))
    conn.execute("UPDATE invoices SET status = 'SENDING' WHERE invoice_id = %s", (invoice_id,))
    row = conn.execute("SELECT id FROM invoices WHERE invoice_id = %s", (invoice_id,)).fetchone()
    assert row is not None
    return int(row[0])


def issue(conn: psycopg.Connection[Any], invoice_id: str, pk: int, body: bytes) -> None:
    digest = hashlib.sha256(body).hexdigest()
    conn.execute("INSERT INTO invoice_documents (invoice_pk, sha256, media_type, format, body) "
                 "VALUES (%s, %s, 'application/xml', 'ubl-tr', %s)", (pk, digest, body))
    conn.execute("UPDATE invoices SET status = 'ISSUED', document_sha256 = %s, "
                 "integrator_ref = %s WHERE invoice_id = %s", (digest, f"ref-{invoice_id}",
                                                               invoice_id))


def build_chain(db_url: str, text: str) -> str:
    """acme/ABC: 1 issued (``text`` in its message and document), 2 rejected (``text`` in its
    reason), 3 issued, 4 rejected then retried and issued, 5 sealed (SENDING), 6 taken by
    next_number (no invoice)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO series (tenant, code, prefix) VALUES ('acme', 'ABC', 'ABC')")
        one = seal(conn, "inv-1", json.dumps({"invoice_id": "inv-1", "note": text,
                                              "customer": {"name": f"Örnek {text}"}},
                                             ensure_ascii=False))
        issue(conn, "inv-1", one, f"<Invoice>{text}</Invoice>".encode())
        seal(conn, "inv-2", '{"invoice_id": "inv-2"}')
        conn.execute("UPDATE invoices SET status = 'REJECTED', last_error = %s "
                     "WHERE invoice_id = 'inv-2'", (f"refused {text}",))
        three = seal(conn, "inv-3", '{"invoice_id": "inv-3", "rate": 0.5}')
        issue(conn, "inv-3", three, b"<Invoice>3</Invoice>")
        four = seal(conn, "inv-4", '{"invoice_id": "inv-4"}')
        conn.execute("UPDATE invoices SET status = 'REJECTED', last_error = 'bad' "
                     "WHERE invoice_id = 'inv-4'")
        conn.execute("UPDATE invoices SET status = 'SENDING' WHERE invoice_id = 'inv-4'")
        issue(conn, "inv-4", four, b"<Invoice>4</Invoice>")
        seal(conn, "inv-5", '{"invoice_id": "inv-5"}')
        conn.execute("SELECT next_number('acme', 'ABC')")
        kinds = [r[0] for r in conn.execute("SELECT kind FROM chain_records ORDER BY seq")]
    assert kinds == ["seal", "issued", "seal", "rejected", "seal", "issued", "seal",
                     "rejected", "issued", "seal", "seal"]
    return db_url


@pytest.fixture
def chain_db(db_url: str) -> str:
    """The chain, with U+2028, U+2029 and U+0085 in a message, a document and a reason."""
    return build_chain(db_url, SEPARATORS)


@pytest.fixture(scope="module")
def plain_export(template_db: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[tuple[Path, dict[str, str]]]:
    """The export of the chain with its text plain, made and verified once for the module: the
    base every hostile export is a copy of (each test changes its own copy), and the
    environment to verify it with."""
    name = f"gapless_t_{RUN_ID}_{uuid.uuid4().hex[:8]}"
    create_database(name, template=template_db)
    try:
        url = build_chain(database_url(name), "plain text")
        env = process_environment(Settings(database_url=url))
        out = export(env, url, tmp_path_factory.mktemp("plain") / "export")
        genuine = verify(env, str(out))
        assert genuine.returncode == 0, genuine.stdout + genuine.stderr
        yield out, env
    finally:
        drop_database(name)


def tamper(url: str, *statements: str) -> None:
    """Change the database as a superuser could: every trigger off."""
    with psycopg.connect(url) as conn:
        conn.execute("SET session_replication_role = replica")
        for statement in statements:
            conn.execute(statement)


def seq_of(url: str, query: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def number_of(no: int) -> str:
    return f"ABC{_year()}{no:09d}"


def _year() -> str:
    from tests.helpers import today

    return today()[:4]


def env_for(gapless_env: dict[str, str], url: str) -> dict[str, str]:
    return {**gapless_env, "GAPLESS_DATABASE_URL": url}


def export(gapless_env: dict[str, str], url: str, out: Path) -> Path:
    result = run_gapless(["chain", "export", "--out", str(out)], env_for(gapless_env, url))
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def verify(gapless_env: dict[str, str], *args: str,
           url: str = OFFLINE) -> subprocess.CompletedProcess[str]:
    """``gapless chain verify`` in a process whose address space is limited to 1 GiB."""
    return run_gapless(["chain", "verify", *args], env_for(gapless_env, url), timeout=120,
                       address_space=MEMORY)


def refused(result: subprocess.CompletedProcess[str], why: str) -> str:
    """Exit 1, one line on stderr, ``malformed export: …`` matching ``why``; no traceback."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gapless: malformed export: "), lines
    assert re.search(why, lines[0]), lines[0]
    return lines[0]


def broken(result: subprocess.CompletedProcess[str], no: int) -> str:
    """Exit 1 naming number ``no`` (printed) as the chain's first break; no traceback."""
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("chain: BROKEN")]
    assert f": number {number_of(no)} ({no}): " in line, line
    return line


# ------------------------------------------------------------------ inotify: nothing opened

class Watch:
    """inotify on a file outside the export: whether anything opened or read it."""

    IN_ACCESS, IN_OPEN, IN_NONBLOCK = 0x1, 0x20, 0o4000

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        wd = self.libc.inotify_add_watch(self.fd, str(path).encode(),
                                         self.IN_OPEN | self.IN_ACCESS)
        assert wd >= 0, os.strerror(ctypes.get_errno())

    def opened(self) -> bool:
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return False
        (mask,) = struct.unpack_from("I", data, 4)  # struct inotify_event: wd, mask, ...
        return bool(mask & (self.IN_OPEN | self.IN_ACCESS))

    def drain(self) -> None:
        while self.opened():
            pass

    def close(self) -> None:
        os.close(self.fd)


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[Path, Watch]]:
    """A file outside every export (in a directory of its own); whether anything opens or
    reads it is watched."""
    path = tmp_path / "outside" / "sentinel"
    path.parent.mkdir()
    path.write_text('{"seq": 1}\n')
    watch = Watch(path)
    yield path, watch
    watch.close()


# ------------------------------------------------------------------ finding 3 and the export

def test_a_genuine_export_with_line_separators_verifies_and_is_private(
        chain_db: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    """U+2028, U+2029 and U+0085 in messages, reasons and documents: the export escapes them
    (its lines split on LF only), and ``chain verify DIR`` agrees with the database. The
    export is a new directory 0700 and its files 0600."""
    result = run_gapless(["chain", "verify"], env_for(gapless_env, chain_db))
    assert result.returncode == 0, result.stdout + result.stderr
    out = export(gapless_env, chain_db, tmp_path / "export")
    for name in ("records.jsonl", "invoices.jsonl", "manifest.json"):
        data = (out / name).read_bytes()
        assert data.isascii(), name
        assert b"\\u2028" in data or name == "manifest.json"
    assert [json.loads(line)["kind"] for line in
            (out / "records.jsonl").read_bytes().split(b"\n") if line].count("seal") == 6
    result = verify(gapless_env, str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chain: verified, 1 chain(s), 6 sealed number(s)" in result.stdout
    modes = {str(p.relative_to(out)): stat.S_IMODE(p.lstat().st_mode)
             for p in [out, *out.rglob("*")]}
    assert modes.pop(".") == 0o700
    assert modes.pop("documents") == 0o700
    assert set(modes.values()) == {0o600}, modes
    assert len(modes) == 3 + 3  # manifest, records, invoices; three documents


def test_a_number_of_34_significant_digits_is_hashed_exactly(
        db_url: str, gapless_env: dict[str, str]) -> None:
    """The database seals the message's exact numbers; the verification must not round them
    to 28 digits (Decimal.normalize would)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO series (tenant, code, prefix) VALUES ('acme', 'ABC', 'ABC')")
        seal(conn, "inv-1", '{"invoice_id": "inv-1", "rate": ' + EXACT + "}")
    result = run_gapless(["chain", "verify"], env_for(gapless_env, db_url))
    assert result.returncode == 0, result.stdout + result.stderr


def test_export_writes_to_a_new_directory_only(chain_db: str, gapless_env: dict[str, str],
                                               tmp_path: Path) -> None:
    """An existing non-empty directory, a symbolic link or a file is refused (exit 2, one line,
    nothing written); an existing empty directory of this user is taken and made 0700."""
    env = env_for(gapless_env, chain_db)
    full = tmp_path / "full"
    full.mkdir()
    target = tmp_path / "elsewhere.json"
    (full / "records.jsonl").symlink_to(target)  # a link planted for the export to follow
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    (tmp_path / "file").write_text("x")
    for out, why in ((full, "exists and is not empty"), (tmp_path / "link", "symbolic link"),
                     (tmp_path / "file", "is not a directory")):
        result = run_gapless(["chain", "export", "--out", str(out)], env)
        assert result.returncode == 2, result.stdout + result.stderr
        [line] = result.stderr.splitlines()
        assert why in line, line
    assert not target.exists()
    assert list(elsewhere.iterdir()) == []
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    export(gapless_env, chain_db, empty)
    assert stat.S_IMODE(empty.stat().st_mode) == 0o700
    assert verify(gapless_env, str(empty)).returncode == 0


# ------------------------------------------------------------------ finding 9: the chain checks

def test_a_seal_whose_invoice_was_deleted_fails_naming_the_number(
        chain_db: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    """A REJECTED invoice's row deleted: its seal names an invoice nothing holds (I8), in the
    database and in an export of it."""
    tamper(chain_db, "DELETE FROM invoices WHERE invoice_id = 'inv-2'")
    line = broken(run_gapless(["chain", "verify"], env_for(gapless_env, chain_db)), 2)
    assert "sealed for invoice 'inv-2', but no invoice holds this number" in line
    out = export(gapless_env, chain_db, tmp_path / "export")
    line = broken(verify(gapless_env, str(out)), 2)
    assert "sealed for invoice 'inv-2', but no invoice holds this number" in line


def test_a_removed_record_is_reported_with_a_number(
        chain_db: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    """The rejected record of number 4 (retried and issued since) removed: nothing but the
    gap shows it; the gap is reported naming the number whose link it breaks."""
    seq = seq_of(chain_db, "SELECT seq FROM chain_records WHERE kind = 'rejected' "
                           "AND reserved_no = 4")
    tamper(chain_db, f"DELETE FROM chain_records WHERE seq = {seq}")
    line = broken(run_gapless(["chain", "verify"], env_for(gapless_env, chain_db)), 4)
    assert (f"record seq {seq} is missing: removed between seq {seq - 1} (number "
            f"{number_of(4)}) and seq {seq + 1} (number {number_of(4)})") in line
    out = export(gapless_env, chain_db, tmp_path / "export")
    assert broken(verify(gapless_env, str(out)), 4) == line


def test_a_number_known_to_the_chain_is_never_shown_as_a_question_mark(
        chain_db: str, gapless_env: dict[str, str]) -> None:
    """Number 5's seal record removed (the next record seals 6): its invoice prints it."""
    seq = seq_of(chain_db, "SELECT seq FROM chain_records WHERE kind = 'seal' "
                           "AND reserved_no = 5")
    tamper(chain_db, f"DELETE FROM chain_records WHERE seq = {seq}")
    result = run_gapless(["chain", "verify"], env_for(gapless_env, chain_db))
    assert "number ?" not in result.stdout
    broken(result, 5)


def test_the_genesis_preimage_length_in_the_doc_is_the_true_one() -> None:
    from gapless.ops.chain import VERSION, canonical_json

    preimage = (f"{VERSION}\n" + canonical_json(
        {"tenant": "acme", "series": "ABC", "period_key": "2026"})).encode()
    doc = (ROOT / "docs" / "chain.md").read_text(encoding="utf-8")
    [stated] = re.findall(r"genesis is the SHA-256 of the (\d+) bytes", doc)
    assert int(stated) == len(preimage) == 68


# ------------------------------------------------------------------ finding 4: hostile exports

def edit_lines(path: Path, change: Callable[[list[bytes]], list[bytes]]) -> None:
    lines = [line for line in path.read_bytes().split(b"\n") if line]
    path.write_bytes(b"\n".join(change(lines)) + b"\n")


def edit_json_line(path: Path, index: int, change: Callable[[dict[str, Any]], Any]) -> None:
    def apply(lines: list[bytes]) -> list[bytes]:
        lines[index] = json.dumps(change(json.loads(lines[index]))).encode()
        return lines

    edit_lines(path, apply)


def with_(key: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda row: {**row, key: value}


def without(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda row: {k: v for k, v in row.items() if k != key}


def first_document(out: Path) -> str:
    return next(json.loads(line)["documents"][0] for line in
                (out / "invoices.jsonl").read_text().splitlines() if json.loads(line)["documents"])


def _traversal(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "invoices.jsonl", 0, with_("documents", ["../../outside/sentinel"]))
    return "not a SHA-256"


def _document_link(out: Path, sentinel: Path) -> str:
    name = first_document(out)
    (out / "documents" / name).unlink()
    (out / "documents" / name).symlink_to(sentinel)
    return f"documents/{name}: a symbolic link: not followed"


def _documents_link(out: Path, sentinel: Path) -> str:
    shutil.rmtree(out / "documents")
    (out / "documents").symlink_to(sentinel.parent)
    return "documents/: a symbolic link: not followed"


def _records_link(out: Path, sentinel: Path) -> str:
    (out / "records.jsonl").unlink()
    (out / "records.jsonl").symlink_to(sentinel)
    return "records.jsonl: a symbolic link: not followed"


def _manifest_link(out: Path, sentinel: Path) -> str:
    sentinel.write_bytes((out / "manifest.json").read_bytes())
    (out / "manifest.json").unlink()
    (out / "manifest.json").symlink_to(sentinel)
    return "manifest.json: a symbolic link: not followed"


def _records_dev_zero(out: Path, sentinel: Path) -> str:
    (out / "records.jsonl").unlink()
    (out / "records.jsonl").symlink_to("/dev/zero")
    return "records.jsonl: a symbolic link"


def _records_fifo(out: Path, sentinel: Path) -> str:
    (out / "records.jsonl").unlink()
    os.mkfifo(out / "records.jsonl")
    return "records.jsonl: not a regular file"


def _records_huge(out: Path, sentinel: Path) -> str:
    with (out / "records.jsonl").open("r+b") as f:
        f.truncate(64 << 30)  # sparse: 64 GiB claimed
    return r"records.jsonl: \d+ bytes, more than the \d+ accepted"


def _records_one_long_line(out: Path, sentinel: Path) -> str:
    with (out / "records.jsonl").open("r+b") as f:
        f.truncate(512 << 20)  # sparse: half a GiB of NUL after the records, no LF
    return r"records.jsonl line \d+: longer than \d+ bytes"


def _claims_ten_billion(out: Path, sentinel: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["chains"][0]["last_no"] = 10**10
    (out / "manifest.json").write_text(json.dumps(manifest))
    return "UNPRINTED:7"  # number 7, the first the chain has no seal of


def _claims_a_huge_seq(out: Path, sentinel: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["chains"][0]["head_seq"] = 10**18
    (out / "manifest.json").write_text(json.dumps(manifest))
    return "BROKEN:6"  # the last record: the head is not it


def _not_json(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [*lines[:2], b"{not json", *lines[2:]])
    return r"records.jsonl line 3: not JSON"


def _not_utf8(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [lines[0].replace(b"acme", b"ac\xffe"),
                                                     *lines[1:]])
    return "records.jsonl line 1: not UTF-8"


def _a_string_seq(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "records.jsonl", 1, with_("seq", "2"))
    return "records.jsonl line 2: seq is not an integer"


def _a_bool_number(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "records.jsonl", 0, with_("reserved_no", True))
    return "records.jsonl line 1: reserved_no is not an integer"


def _a_missing_key(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "records.jsonl", 0, without("hash"))
    return "records.jsonl line 1: missing key 'hash'"


def _an_array_line(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [b"[1, 2]", *lines])
    return "records.jsonl line 1: not a JSON object"


def _deep_nesting(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [b"[" * 100_000 + b"]" * 100_000, *lines])
    return "records.jsonl line 1: nested more than"


def _an_unknown_kind(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "records.jsonl", 0, with_("kind", "seal\u2028[/]"))
    return r"records.jsonl line 1: kind 'seal\\u2028\[/\]' is not one of"


def _a_lone_surrogate(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [
        lines[0].replace(b'"acme"', b'"\\ud800acme"'), *lines[1:]])
    return "records.jsonl line 1: a string holds a lone surrogate"


def _reordered(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [lines[1], lines[0], *lines[2:]])
    return r"records.jsonl line 2: seq 1 after seq 2"


def _duplicated(out: Path, sentinel: Path) -> str:
    edit_lines(out / "records.jsonl", lambda lines: [lines[0], *lines])
    return r"records.jsonl line 2: seq 1 after seq 1"


def _a_huge_exponent(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "invoices.jsonl", 1, with_("message", '{"a": 1e999999999}'))
    return "invoices.jsonl line 2: message: a number of more than"


def _many_big_numbers(out: Path, sentinel: Path) -> str:
    message = "[" + ",".join(["1e100000"] * 2000) + "]"
    edit_json_line(out / "invoices.jsonl", 1, with_("message", message))
    return "invoices.jsonl line 2: message: its numbers exceed"


def _a_deep_message(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "invoices.jsonl", 1, with_("message", "[" * 600 + "]" * 600))
    return "invoices.jsonl line 2: message: nested more than 512 levels deep"


def _a_message_not_json(out: Path, sentinel: Path) -> str:
    edit_json_line(out / "invoices.jsonl", 1, with_("message", "{"))
    return "invoices.jsonl line 2: message: not JSON"


def _two_invoices_one_number(out: Path, sentinel: Path) -> str:
    edit_lines(out / "invoices.jsonl", lambda lines: [lines[0], *lines])
    return "invoices.jsonl line 2: a second invoice holds number 1"


def _wrong_format(out: Path, sentinel: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "format": "other/1"}))
    return "manifest.json: not a gapless-chain-export/1 export"


def _chains_not_a_list(out: Path, sentinel: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "chains": {"a": 1}}))
    return "manifest.json: chains is not an array"


def _a_negative_last_no(out: Path, sentinel: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["chains"][0]["last_no"] = -1
    (out / "manifest.json").write_text(json.dumps(manifest))
    return "manifest.json chain 1: last_no -1 is out of range"


def _records_missing(out: Path, sentinel: Path) -> str:
    (out / "records.jsonl").unlink()
    return "records.jsonl is missing"


HOSTILE: dict[str, Callable[[Path, Path], str]] = {
    f.__name__.strip("_"): f for f in (
        _traversal, _document_link, _documents_link, _records_link, _manifest_link,
        _records_dev_zero, _records_fifo, _records_huge, _records_one_long_line,
        _claims_ten_billion, _claims_a_huge_seq, _not_json, _not_utf8, _a_string_seq,
        _a_bool_number, _a_missing_key, _an_array_line, _deep_nesting, _an_unknown_kind,
        _a_lone_surrogate, _reordered, _duplicated, _a_huge_exponent, _many_big_numbers,
        _a_deep_message, _a_message_not_json, _two_invoices_one_number, _wrong_format,
        _chains_not_a_list, _a_negative_last_no, _records_missing)}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_exports_are_refused_in_bounded_memory_reading_nothing_outside(
        case: str, plain_export: tuple[Path, dict[str, str]], tmp_path: Path,
        sentinel: tuple[Path, Watch]) -> None:
    """A hostile export: exit 1 with "malformed export: …" (or the chain's failure, naming the
    number), one line, no traceback, under a 1 GiB address-space limit; the sentinel outside
    the directory is never opened."""
    path, watch = sentinel
    genuine, env = plain_export
    out = Path(shutil.copytree(genuine, tmp_path / "export", symlinks=True))
    expected = HOSTILE[case](out, path)
    watch.drain()  # the test's own edits (a copy into the sentinel) are not the verifier's
    result = verify(env, str(out))
    if expected.startswith("BROKEN:"):
        broken(result, int(expected.removeprefix("BROKEN:")))
    elif expected.startswith("UNPRINTED:"):
        no = int(expected.removeprefix("UNPRINTED:"))
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        assert (f": number ({no}; printed nowhere in the chain): sealed (the counter is at "
                f"{10**10}) but no seal record") in result.stdout
    else:
        refused(result, expected)
    assert not watch.opened(), "the file outside the export was opened"


def test_checkpoints_of_a_hostile_export_are_never_followed(
        chain_db: str, gapless_env: dict[str, str], tmp_path: Path,
        sentinel: tuple[Path, Watch]) -> None:
    """The export's checkpoints/ as a symbolic link out of it, or a checkpoint file that is
    one: refused, exit 1, the target never opened."""
    path, watch = sentinel
    env = env_for(gapless_env, chain_db)
    assert run_gapless(["chain", "keygen", "--out", str(tmp_path / "k")], env).returncode == 0
    result = run_gapless(["chain", "checkpoint", "--key", str(tmp_path / "k"), "--out",
                          str(tmp_path / "ck")], env)
    assert result.returncode == 0, result.stderr
    result = run_gapless(["chain", "export", "--out", str(tmp_path / "e"), "--checkpoints",
                          str(tmp_path / "ck")], env)
    assert result.returncode == 0, result.stderr
    pub = str(tmp_path / "k.pub")
    assert verify(gapless_env, str(tmp_path / "e"), "--public-key", pub).returncode == 0
    assert stat.S_IMODE((tmp_path / "e" / "checkpoints").stat().st_mode) == 0o700
    [copy] = (tmp_path / "e" / "checkpoints").iterdir()
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    linked_dir = tmp_path / "linked-dir"
    shutil.copytree(tmp_path / "e", linked_dir)
    shutil.rmtree(linked_dir / "checkpoints")
    path.rename(path.parent / copy.name)  # the same inode, still watched
    (linked_dir / "checkpoints").symlink_to(path.parent)
    refused(verify(gapless_env, str(linked_dir), "--public-key", pub),
            "checkpoints/: a symbolic link: not followed")
    assert not watch.opened()
    (path.parent / copy.name).rename(path)
    linked_file = tmp_path / "linked-file"
    shutil.copytree(tmp_path / "e", linked_file)
    [mine] = (linked_file / "checkpoints").iterdir()
    mine.unlink()
    mine.symlink_to(path)
    result = verify(gapless_env, str(linked_file), "--public-key", pub)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"checkpoint: INVALID {mine.name}: a symbolic link: not followed; not read" \
        in result.stdout
    assert not watch.opened()


def test_a_scope_claimed_by_an_export_does_not_hide_signed_heads(
        chain_db: str, gapless_env: dict[str, str], tmp_path: Path) -> None:
    """An export that states a scope narrower than what it holds is malformed; an export
    emptied and restated as another tenant's, verified by an auditor for ``--tenant acme``,
    is checked against acme's signed heads (its chain is missing), not the export's claim."""
    env = env_for(gapless_env, chain_db)
    assert run_gapless(["chain", "keygen", "--out", str(tmp_path / "k")], env).returncode == 0
    result = run_gapless(["chain", "checkpoint", "--key", str(tmp_path / "k"), "--out",
                          str(tmp_path / "ck")], env)
    assert result.returncode == 0, result.stderr
    genuine = tmp_path / "e"
    result = run_gapless(["chain", "export", "--out", str(genuine), "--checkpoints",
                          str(tmp_path / "ck")], env)
    assert result.returncode == 0, result.stderr
    pub = str(tmp_path / "k.pub")
    narrower = tmp_path / "narrower"
    shutil.copytree(genuine, narrower)
    manifest = json.loads((narrower / "manifest.json").read_text())
    (narrower / "manifest.json").write_text(json.dumps(
        {**manifest, "scope": {"tenant": "nobody", "series": None}}))
    refused(verify(gapless_env, str(narrower), "--public-key", pub),
            "manifest.json: a chain outside the scope the manifest states")
    emptied = tmp_path / "emptied"
    shutil.copytree(genuine, emptied)
    (emptied / "manifest.json").write_text(json.dumps(
        {**manifest, "scope": {"tenant": "nobody", "series": None}, "chains": []}))
    (emptied / "records.jsonl").write_bytes(b"")
    (emptied / "invoices.jsonl").write_bytes(b"")
    result = verify(gapless_env, str(emptied), "--public-key", pub, "--tenant", "acme")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the chain is missing: the checkpoint signed at" in result.stdout
