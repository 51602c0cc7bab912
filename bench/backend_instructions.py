"""Benchmark: PostgreSQL's instructions per reservation and per issued invoice, counted by
valgrind's callgrind in a single-user backend — the database's side of the seal, with no client,
network or neighbour in the count.

    .venv/bin/python bench/backend_instructions.py [--count 500] [--paths raw,reserve,issue]
                                                   [--against PATH]

A private cluster (``initdb`` in a temporary folder, its own port and socket, removed after) gets
the schema of a checkout (``python -m gapless migrate`` run in that checkout), one series per
path, enough drafts, and 100,000 other invoices, analyzed (plans are made for tables of a
database in service: a plan made for a table of a few rows scans it whole). Then ``postgres
--single`` runs each path's script under callgrind twice, once with the warm-up alone and once
with ``--count`` more units, and the difference divided by ``--count`` is the cost of one unit
(start-up, catalog caches and the first plans cancel out):

* raw      — BEGIN; the counter upsert (``INSERT … ON CONFLICT DO UPDATE … RETURNING``); COMMIT
* reserve  — BEGIN; ``reserve_tenant_number`` (lock the draft, seal, pin, history, chain); COMMIT
* issue    — the worker's two writes, each its own transaction: ``intake_invoice`` (store the
             draft, lock it, seal, take the lease) and ``gapless_mark_issued_many`` (ISSUED, its
             document, its chain record)

Single-user mode reads one query per line and plans each line anew (a client of the worker's
kind prepares its statements): that top-level parse is in every path's count alike. The commit's
WAL flush is counted as the instructions around it; its wait is not. ``--against PATH`` measures
a second checkout (e.g. ``git worktree add /tmp/base <commit>``) the same way, path by path.

Needs valgrind and PostgreSQL's server binaries (``pg_config --bindir``, or the newest
``/usr/lib/postgresql/*/bin``); as root, the server runs as the ``postgres`` user (``runuser``).
About half a minute per path and checkout.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import ROOT, clean_env, free_port, machine, print_table

PATHS = ("raw", "reserve", "issue")
WARM_UP = 50
#: Invoices already in the database (drafts of another series), as in a database in service.
HISTORY = 100_000
DOCUMENT = '{"kind": "bench"}'


def server_bindir() -> Path:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` are."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = Path(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                    check=True).stdout.strip())
        if (found / "initdb").exists():
            return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    if not versions:
        raise SystemExit("PostgreSQL's server binaries (initdb) not found")
    return versions[-1].parent


def as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run as ``postgres`` then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def script(path: str, units: int) -> str:
    """The single-user script of ``path``: the warm-up, then ``units`` more."""
    lines = []
    for i in range(WARM_UP + units):
        if path == "raw":
            lines.append(
                "BEGIN; INSERT INTO number_counters AS c (tenant, series, period_key, last_no) "
                "VALUES ('bench', 'RAW', 'all', 1) ON CONFLICT (tenant, series, period_key) "
                "DO UPDATE SET last_no = c.last_no + 1 RETURNING c.last_no; COMMIT;")
        elif path == "reserve":
            lines.append(
                "BEGIN; SELECT * FROM reserve_tenant_number('bench', 'JIT-" f"{i}', now(), "
                "10000); COMMIT;")
        else:
            lines.append(
                f"SELECT kind, id FROM intake_invoice('ISS-{i}', 'bench', 'ISS', 1::smallint, "
                "'{\"lines\": []}'::jsonb, 300, 10000, NULL, now());")
            lines.append(
                "SELECT gapless_mark_issued_many(ARRAY[i.id], ARRAY['ref-" f"{i}'], "
                "ARRAY[encode(sha256(convert_to(i.invoice_id, 'UTF8')), 'hex')], "
                "ARRAY['application/json'], ARRAY['json'], "
                f"ARRAY[convert_to('{DOCUMENT}', 'UTF8')]) FROM invoices i "
                f"WHERE i.invoice_id = 'ISS-{i}' AND i.tenant = 'bench';")
    return "\n".join(lines) + "\n"


class Cluster:
    """A private PostgreSQL cluster in a temporary folder."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.folder = Path(tempfile.mkdtemp(prefix="gapless-backend-"))
        self.data = self.folder / "data"
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        subprocess.run(as_server_user([str(bindir / "initdb"), "-D", str(self.data), "-A",
                                       "trust", "-U", "postgres", "--no-sync"]),
                       check=True, capture_output=True)

    def start(self) -> None:
        subprocess.run(as_server_user([
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-l",
            str(self.folder / "server.log"), "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1", "start"]),
            check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w",
                                       "-m", "fast", "stop"]), check=True, capture_output=True)

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, database: str, sql: str) -> None:
        subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.url(database), "-c",
                        sql], check=True, capture_output=True)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def prepare(cluster: Cluster, tree: Path, units: int) -> None:
    """The checkout's schema in database ``bench``, a series per path, drafts for ``reserve``."""
    env = {**clean_env(), "GAPLESS_DATABASE_URL": cluster.url("bench")}
    subprocess.run([sys.executable, "-m", "gapless", "migrate"], cwd=tree, env=env, check=True,
                   capture_output=True)
    cluster.psql("bench", "INSERT INTO series (tenant, code, prefix) VALUES "
                          "('bench', 'RAW', 'RAW'), ('bench', 'JIT', 'JIT'), "
                          "('bench', 'ISS', 'ISS'), ('bench', 'OLD', 'OLD')")
    cluster.psql("bench", "INSERT INTO invoices (invoice_id, tenant, series, payload) "
                          "SELECT 'JIT-' || g, 'bench', 'JIT', '{\"lines\": []}'::jsonb "
                          f"FROM generate_series(0, {WARM_UP + units}) g")
    # The invoices of a database in service, analyzed: plans are made for tables of its size.
    cluster.psql("bench", "INSERT INTO invoices (invoice_id, tenant, series, payload) "
                          "SELECT 'OLD-' || g, 'bench', 'OLD', '{\"lines\": []}'::jsonb "
                          f"FROM generate_series(1, {HISTORY}) g")
    cluster.psql("bench", "VACUUM ANALYZE")


def count(cluster: Cluster, text: str, label: str) -> int:
    """Instructions of a single-user backend running ``text`` on a copy of ``bench``."""
    cluster.start()
    try:
        cluster.psql("postgres", "DROP DATABASE IF EXISTS run")
        cluster.psql("postgres", "CREATE DATABASE run TEMPLATE bench")
    finally:
        cluster.stop()
    out = cluster.folder / f"callgrind.{label}"
    stdin = cluster.folder / f"{label}.sql"
    stdin.write_text(text)
    if os.geteuid() == 0:
        shutil.chown(stdin, "postgres")
    with stdin.open("rb") as feed:
        run = subprocess.run(as_server_user([
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            str(cluster.bindir / "postgres"), "--single", "-D", str(cluster.data), "run"]),
            stdin=feed, capture_output=True, text=True, check=False)
    if "ERROR:" in run.stdout or "ERROR:" in run.stderr:
        error = next(line for line in (run.stdout + run.stderr).splitlines() if "ERROR:" in line)
        raise SystemExit(f"{label}: the backend refused the script: {error.strip()}")
    summary = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
    if summary is None:
        raise SystemExit(f"{label}: no callgrind summary in {out}")
    return int(summary.group(1))


def measure(tree: Path, paths: list[str], units: int, bindir: Path) -> dict[str, float]:
    """Instructions per unit of each path, with ``tree``'s schema."""
    cluster = Cluster(bindir)
    try:
        cluster.start()
        try:
            prepare(cluster, tree, units)
        finally:
            cluster.stop()
        costs = {}
        for path in paths:
            base = count(cluster, script(path, 0), f"{path}.0")
            full = count(cluster, script(path, units), f"{path}.{units}")
            costs[path] = (full - base) / units
            print(f"  {path} ({tree}): {costs[path] / 1e3:,.0f} k instructions", file=sys.stderr,
                  flush=True)
        return costs
    finally:
        cluster.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--against", type=Path,
                        help="Another checkout of gapless, measured path by path too.")
    args = parser.parse_args()
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    bindir = server_bindir()
    trees = [("this checkout", ROOT)]
    if args.against is not None:
        trees.append((f"{args.against}", args.against.resolve()))
    results = {label: measure(tree, paths, args.count, bindir) for label, tree in trees}
    print(f"machine: {machine()}; PostgreSQL at {bindir}; "
          f"{args.count} units after {WARM_UP} of warm-up; callgrind, single-user backend\n")
    rows = []
    for path in paths:
        for label, _ in trees:
            cost = results[label][path]
            ratio = f"{cost / results[label]['raw']:.2f}" if "raw" in results[label] else "—"
            rows.append((path, label, f"{cost / 1e3:,.0f}", ratio))
    print_table("PostgreSQL instructions per unit (thousands; lower is better)",
                ["path", "checkout", "k instructions", "÷ raw upsert"], rows)


if __name__ == "__main__":
    main()
