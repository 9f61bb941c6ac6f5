#!/usr/bin/env python3
"""ninetrix beside LangGraph, in one run: the same conversation written through each store.

Every turn of a conversation is one durable write holding that turn's two messages (a user and
an assistant message, ~1 KB of pseudo-random text each, so no store's compression flatters it):

- ninetrix: `ninetrix api` over loopback HTTP, one checkpoint per turn that *appends* the turn's
  two messages; the client is Python's `http.client` with one keep-alive connection per
  conversation. On SQLite (WAL, synchronous=FULL, group commit) and on Postgres
  (`synchronous_commit = on`, the server's default).
- LangGraph: `SqliteSaver` (langgraph-checkpoint-sqlite) and `AsyncPostgresSaver`
  (langgraph-checkpoint-postgres) in process, at their defaults (as `from_conn_string` opens them),
  one `put` per turn whose checkpoint holds the conversation's `messages` channel — LangGraph's
  storage model: the channel's full value is stored again whenever it changes.
- the floor: one row per turn (the turn's two messages as JSON) inserted and committed by a
  plain driver with no server in between: Python's `sqlite3` (WAL, synchronous=FULL) and
  `psycopg` (autocommit off, one INSERT + COMMIT).

Scenarios: one 200-turn conversation; 32 conversations × 50 turns written concurrently (one
thread — or, for AsyncPostgresSaver, one task — per conversation). Reported: writes/s (all
writes ÷ wall time), p50/p99 of one write as the caller sees it (including the client's own
encoding: JSON for ninetrix, LangGraph's serializer for LangGraph; the floor's row is encoded
before its clock starts), and the bytes each store holds per conversation (tables and indexes,
less the empty schema). Then the ratios ninetrix ÷ LangGraph and ninetrix ÷ floor.

Postgres: unless `--postgres-url` names a server, the script starts a throwaway cluster of
Debian's `postgresql` (initdb in a temporary directory, a free loopback port; as the `postgres`
user when run as root) and stops and deletes it at the end; `--no-postgres` skips that half.
Every database, API process and cluster it starts is stopped before it exits.

Run (from the repository root; a few minutes on 2 cores):

    pip install -r bench/requirements.txt
    cargo build --release -p ninetrix-cli
    python3 bench/langgraph_compare.py            # prints Markdown tables (--runs 3: medians of 3)

Opt-in: CI does not run it. `NINETRIX_BIN` overrides the binary's path.
"""

import argparse
import asyncio
import glob
import http.client
import importlib.metadata
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid

BIN = os.environ.get("NINETRIX_BIN", "target/x86_64-unknown-linux-gnu/release/ninetrix")
SCENARIOS = [("one 200-turn conversation", 1, 200), ("32 conversations × 50 turns, concurrent", 32, 50)]

# ~1 KB of pseudo-random lowercase text per message (seeded: every run writes the same bytes).
_rng = random.Random(20261123)
TEXTS = ["".join(_rng.choice("abcdefghijklmnopqrstuvwxyz     ") for _ in range(900)) for _ in range(512)]


def message(role, conv, n):
    text = TEXTS[(conv * 7919 + 2 * n + (role == "assistant")) % len(TEXTS)]
    return {"id": str(uuid.uuid4()), "role": role, "blocks": [{"type": "text", "text": f"{role} {n} {text}"}],
            "created_at": "2026-01-01T00:00:00Z"}


def turn_messages(conv, n):
    return [message("user", conv, n), message("assistant", conv, n)]


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, round((len(s) - 1) * p))]


def concurrently(k, fn):
    """Runs fn(conv, samples) on k threads; returns all samples and the wall time."""
    samples, errors = [], []

    def run(conv):
        try:
            fn(conv, samples)
        except BaseException as e:  # reported after the join, never swallowed
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(k)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return samples, elapsed


# ---------- sizes ----------
def sqlite_used_bytes(path):
    """Bytes of the pages in use (WAL included, free pages left out)."""
    con = sqlite3.connect(path)
    try:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        pages = con.execute("PRAGMA page_count").fetchone()[0]
        free = con.execute("PRAGMA freelist_count").fetchone()[0]
        return (pages - free) * page_size
    finally:
        con.close()


PG_SIZE_SQL = """SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind IN ('r', 'p', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
    AND n.nspname NOT LIKE 'pg_toast%'"""


def pg_used_bytes(url):
    import psycopg
    with psycopg.connect(url, autocommit=True) as con:
        return con.execute(PG_SIZE_SQL).fetchone()[0]


# ---------- ninetrix ----------
class Api:
    """`ninetrix api` as a child process on a free loopback port; stopped on exit."""

    def __init__(self, database):
        self.proc = subprocess.Popen([BIN, "api", "--insecure-dev", "--listen", "127.0.0.1:0", "--database", database],
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"listening on http://([0-9.]+):([0-9]+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                threading.Thread(target=lambda: [self.log.append(x) for x in self.proc.stderr], daemon=True).start()
                return
        self.proc.wait()
        raise SystemExit(f"ninetrix api ({BIN}) did not start: {''.join(self.log[-5:])}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def call(conn, method, path, body, expect):
    conn.request(method, path, body=json.dumps(body).encode(), headers={"content-type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != expect:
        raise RuntimeError(f"{method} {path}: HTTP {resp.status} (expected {expect}): {data[:300]!r}")
    return data


def ninetrix_conversation(api, conv, turns, samples):
    conn = http.client.HTTPConnection(api.host, api.port)  # one keep-alive connection per conversation
    try:
        t = str(uuid.uuid4())
        epoch = json.loads(call(conn, "POST", f"/v1/runners/threads/{t}/claim", {}, 200))["epoch"]
        path = f"/v1/runners/threads/{t}/checkpoints"
        for n in range(turns):
            append = turn_messages(conv, n)
            state = {"turn_seq": n + 1, "turn_start_history_len": 2 * n + 1, "status": "idle", "inbox_cursor": n + 1}
            t0 = time.perf_counter()
            call(conn, "POST", path, {"epoch": epoch, "parent_version": n, "append": append, "state": state}, 201)
            samples.append(time.perf_counter() - t0)
    finally:
        conn.close()


def run_ninetrix_sqlite(k, turns):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "api.db")
        with Api(f"sqlite://{db}") as api:
            before = sqlite_used_bytes(db)
            samples, elapsed = concurrently(k, lambda c, s: ninetrix_conversation(api, c, turns, s))
        return samples, elapsed, sqlite_used_bytes(db) - before


def run_ninetrix_postgres(pg, k, turns):
    url = pg.new_database("nx")
    with Api(url) as api:
        before = pg_used_bytes(url)
        samples, elapsed = concurrently(k, lambda c, s: ninetrix_conversation(api, c, turns, s))
        after = pg_used_bytes(url)
    return samples, elapsed, after - before


# ---------- LangGraph ----------
def langgraph_checkpoint(messages, n):
    from langgraph.checkpoint.base import empty_checkpoint
    ckpt = empty_checkpoint()
    ckpt["id"] = str(uuid.uuid1())
    ckpt["channel_values"] = {"messages": messages}
    ckpt["channel_versions"] = {"messages": n + 1}
    return ckpt


def run_langgraph_sqlite(k, turns):
    """One `SqliteSaver` shared by every conversation, as `from_conn_string` opens it.

    (The saver serializes its calls on a lock. One saver per conversation, each on its own
    connection, is no way around it: with 32 of them, puts fail with `sqlite3.OperationalError:
    database is locked` within the run.)"""
    from langgraph.checkpoint.sqlite import SqliteSaver
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "lg.db")
        with SqliteSaver.from_conn_string(db) as saver:
            saver.setup()
            before = sqlite_used_bytes(db)

            def conversation(conv, samples):
                config = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
                messages = []
                for n in range(turns):
                    messages = messages + turn_messages(conv, n)
                    ckpt = langgraph_checkpoint(messages, n)
                    t0 = time.perf_counter()
                    config = saver.put(config, ckpt, {"source": "loop", "step": n, "parents": {}}, {"messages": n + 1})
                    samples.append(time.perf_counter() - t0)

            samples, elapsed = concurrently(k, conversation)
        return samples, elapsed, sqlite_used_bytes(db) - before


def run_langgraph_postgres(pg, k, turns):
    """`AsyncPostgresSaver.from_conn_string` (autocommit, as LangGraph opens it), one saver and
    connection per conversation, all conversations as tasks of one event loop. (One saver shared
    by many conversations would serialize them on its asyncio lock, whatever pool it is given.)"""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    url = pg.new_database("lg")

    async def setup():
        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            await saver.setup()

    async def conversation(conv, samples):
        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            config = {"configurable": {"thread_id": str(uuid.uuid4()), "checkpoint_ns": ""}}
            messages = []
            for n in range(turns):
                messages = messages + turn_messages(conv, n)
                ckpt = langgraph_checkpoint(messages, n)
                t0 = time.perf_counter()
                config = await saver.aput(config, ckpt, {"source": "loop", "step": n, "parents": {}}, {"messages": n + 1})
                samples.append(time.perf_counter() - t0)

    async def all_conversations(samples):
        await asyncio.gather(*(conversation(c, samples) for c in range(k)))

    asyncio.run(setup())
    before = pg_used_bytes(url)
    samples = []
    t0 = time.perf_counter()
    asyncio.run(all_conversations(samples))
    elapsed = time.perf_counter() - t0
    return samples, elapsed, pg_used_bytes(url) - before


# ---------- the floor ----------
def run_floor_sqlite(k, turns):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "raw.db")
        con = sqlite3.connect(path)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE turns (thread TEXT, n INTEGER, body TEXT, PRIMARY KEY (thread, n))")
        con.commit()
        con.close()
        before = sqlite_used_bytes(path)

        def conversation(conv, samples):
            con = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
            con.execute("PRAGMA synchronous=FULL")
            thread = str(uuid.uuid4())
            for n in range(turns):
                body = json.dumps(turn_messages(conv, n))
                t0 = time.perf_counter()
                con.execute("BEGIN IMMEDIATE")
                con.execute("INSERT INTO turns VALUES (?, ?, ?)", (thread, n, body))
                con.execute("COMMIT")
                samples.append(time.perf_counter() - t0)
            con.close()

        samples, elapsed = concurrently(k, conversation)
        return samples, elapsed, sqlite_used_bytes(path) - before


def run_floor_postgres(pg, k, turns):
    import psycopg
    url = pg.new_database("raw")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE turns (thread uuid, n integer, body text, PRIMARY KEY (thread, n))")
    before = pg_used_bytes(url)

    def conversation(conv, samples):
        with psycopg.connect(url) as con:
            thread = uuid.uuid4()
            for n in range(turns):
                body = json.dumps(turn_messages(conv, n))
                t0 = time.perf_counter()
                con.execute("INSERT INTO turns VALUES (%s, %s, %s)", (thread, n, body))
                con.commit()
                samples.append(time.perf_counter() - t0)

    samples, elapsed = concurrently(k, conversation)
    return samples, elapsed, pg_used_bytes(url) - before


# ---------- a throwaway Postgres ----------
class Postgres:
    """A server to write into: the one `--postgres-url` names, or a throwaway cluster of Debian's
    postgresql started here (trust auth, loopback, a free port) and stopped and deleted on exit."""

    def __init__(self, url=None):
        self.url, self.dir, self.bin, self.count = url, None, None, 0
        if url:
            return
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: [int(x) for x in re.findall(r"\d+", p)])
        if not bins:
            raise SystemExit("no PostgreSQL server found under /usr/lib/postgresql: `apt-get install postgresql`, "
                             "or pass --postgres-url URL (a server to use) or --no-postgres")
        self.bin = os.path.dirname(bins[-1])
        self.dir = tempfile.mkdtemp(prefix="ninetrix-bench-pg-")
        os.chmod(self.dir, 0o755)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        data = os.path.join(self.dir, "data")
        self._as_owner([f"{self.bin}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"])
        self._as_owner([f"{self.bin}/pg_ctl", "-D", data, "-l", os.path.join(self.dir, "log"), "-w", "-o",
                        f"-p {port} -k {self.dir} -c listen_addresses=127.0.0.1", "start"])
        self.url = f"postgres://postgres@127.0.0.1:{port}/postgres"

    def _as_owner(self, argv):
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=self.dir)

    def new_database(self, prefix):
        import psycopg
        self.count += 1
        name = f"ninetrix_bench_{prefix}_{os.getpid()}_{self.count}"
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return re.sub(r"/[^/]*$", f"/{name}", self.url)

    def version(self):
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as con:
            v = con.execute("SHOW server_version").fetchone()[0]
            sync = con.execute("SHOW synchronous_commit").fetchone()[0]
            fsync = con.execute("SHOW fsync").fetchone()[0]
        return f"PostgreSQL {v} (fsync={fsync}, synchronous_commit={sync})"

    def close(self):
        """Drops the databases made here (on a given server) or stops and deletes the cluster."""
        if self.dir is None:
            if self.count:
                import psycopg
                with psycopg.connect(self.url, autocommit=True) as con:
                    for (name,) in con.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                               (f"ninetrix_bench_%_{os.getpid()}_%",)).fetchall():
                        con.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            return
        try:
            self._as_owner([f"{self.bin}/pg_ctl", "-D", os.path.join(self.dir, "data"), "-m", "fast", "-w", "stop"])
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------- report ----------
def versions(pg):
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    pkgs = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in
                     ["langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres", "psycopg"])
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    con = sqlite3.connect(":memory:")
    lg_sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[con.execute("PRAGMA synchronous").fetchone()[0]]
    con.close()
    lines = [f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}; commit {commit or '?'}; {out}",
             f"- machine: {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}, Python {platform.python_version()}; "
             f"load average at the end {os.getloadavg()[0]:.2f}",
             f"- SQLite {sqlite3.sqlite_version} (Python's sqlite3; its default synchronous={lg_sync}, which SqliteSaver "
             "keeps, in WAL mode)", f"- {pkgs}"]
    if pg:
        lines.append(f"- {pg.version()}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--postgres-url", help="write into this server instead of starting a throwaway cluster")
    ap.add_argument("--no-postgres", action="store_true", help="SQLite only")
    ap.add_argument("--runs", type=int, default=1, metavar="N",
                    help="run every store N times (each run in a rotated order) and report each figure's median "
                         "(default 1)")
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit(f"--runs {args.runs}: give 1 or more")
    if not os.access(BIN, os.X_OK):
        raise SystemExit(f"{BIN} not found: run `cargo build --release -p ninetrix-cli` from the repository root "
                         "(or set NINETRIX_BIN)")
    # SIGTERM unwinds like Ctrl-C, so the API and the cluster are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    pg = None if args.no_postgres else Postgres(args.postgres_url)
    stats, names = {}, {}  # (scenario, backend, kind) -> [(writes/s, p50 ms, p99 ms, KB per conversation)]
    try:
        for run_no in range(args.runs):
            for label, k, turns in SCENARIOS:
                plan = [("SQLite", "ninetrix", "ninetrix API (HTTP keep-alive, SQLite)",
                         lambda: run_ninetrix_sqlite(k, turns)),
                        ("SQLite", "langgraph", "LangGraph SqliteSaver", lambda: run_langgraph_sqlite(k, turns)),
                        ("SQLite", "floor", "floor: sqlite3 insert + commit", lambda: run_floor_sqlite(k, turns))]
                if pg:
                    plan += [("Postgres", "ninetrix", "ninetrix API (HTTP keep-alive, Postgres)",
                              lambda: run_ninetrix_postgres(pg, k, turns)),
                             ("Postgres", "langgraph", "LangGraph AsyncPostgresSaver",
                              lambda: run_langgraph_postgres(pg, k, turns)),
                             ("Postgres", "floor", "floor: psycopg insert + commit",
                              lambda: run_floor_postgres(pg, k, turns))]
                # Each run starts at another store, so no store always follows the same one.
                plan = plan[run_no % len(plan):] + plan[:run_no % len(plan)]
                for backend, kind, name, run in plan:
                    print(f"run {run_no + 1}/{args.runs}: {label}: {name}", file=sys.stderr, flush=True)
                    samples, elapsed, size = run()
                    assert len(samples) == k * turns, (name, len(samples))
                    key = (label, backend, kind)
                    names[key] = name
                    stats.setdefault(key, []).append((len(samples) / elapsed, pct(samples, 0.5) * 1e3,
                                                      pct(samples, 0.99) * 1e3, size / k / 1e3))
        print(versions(pg))
    finally:
        if pg:
            pg.close()

    med = {key: tuple(pct([r[i] for r in runs], 0.5) for i in range(4)) for key, runs in stats.items()}
    print(f"- figures: {'the median of ' + str(args.runs) + ' runs (writes/s in brackets: the lowest–highest run)' if args.runs > 1 else 'one run'}")
    print()
    print("| scenario | store | writes/s | p50 ms | p99 ms | KB per conversation |")
    print("|---|---|---:|---:|---:|---:|")
    for key, s in med.items():
        spread = ""
        if args.runs > 1:
            w = [r[0] for r in stats[key]]
            spread = f" ({min(w):.0f}–{max(w):.0f})"
        print(f"| {key[0]} | {names[key]} | {s[0]:.0f}{spread} | {s[1]:.2f} | {s[2]:.2f} | {s[3]:.0f} |")
    print()
    print("Ratios of the medians above (ninetrix's figure ÷ the other's; writes/s: above 1 is ninetrix faster, "
          "in brackets each run's own ratio, lowest–highest; p50, p99, bytes: below 1 is ninetrix lower):")
    print()
    print("| scenario | backend | ninetrix ÷ | writes/s | p50 | p99 | bytes |")
    print("|---|---|---|---:|---:|---:|---:|")
    for label, _, _ in SCENARIOS:
        for backend in (["SQLite", "Postgres"] if pg else ["SQLite"]):
            nx = med[(label, backend, "ninetrix")]
            for kind, what in [("langgraph", "LangGraph"), ("floor", "floor")]:
                o = med[(label, backend, kind)]
                spread = ""
                if args.runs > 1:  # the writes/s ratio of each run (same run, same conditions)
                    r = [a[0] / b[0] for a, b in zip(stats[(label, backend, "ninetrix")], stats[(label, backend, kind)])]
                    spread = f" ({min(r):.2f}–{max(r):.2f})"
                print(f"| {label} | {backend} | {what} | {nx[0] / o[0]:.2f}{spread} | {nx[1] / o[1]:.2f} | "
                      f"{nx[2] / o[2]:.2f} | {nx[3] / o[3]:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
