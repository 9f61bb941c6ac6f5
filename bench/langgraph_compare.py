#!/usr/bin/env python3
"""Checkpoint stores side by side, in one run, with the same message payloads per turn:

- ninetrix: `ninetrix api` (SQLite, WAL, synchronous=FULL) over loopback HTTP, one checkpoint
  per turn appending that turn's two messages;
- LangGraph: `SqliteSaver` (langgraph-checkpoint-sqlite), in process, one checkpoint per turn
  holding the conversation's `messages` channel (its storage model: the full value per checkpoint);
- the raw floor: one row per turn (the turn's two messages) inserted and committed straight into
  SQLite with WAL and synchronous=FULL.

Scenarios: one 200-turn conversation, and 32 conversations of 50 turns written concurrently.
Run: `pip install langgraph-checkpoint-sqlite && cargo build --release -p ninetrix-cli &&
python3 bench/langgraph_compare.py` (prints a Markdown table).
"""

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

BIN = os.environ.get("NINETRIX_BIN", "target/x86_64-unknown-linux-gnu/release/ninetrix")
TEXT = "x" * 900  # ~1 KB per message with the JSON around it


def message(role, n):
    return {"id": str(uuid.uuid4()), "role": role, "blocks": [{"type": "text", "text": f"{role} {n} {TEXT}"}],
            "created_at": "2026-01-01T00:00:00Z"}


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, round((len(s) - 1) * p))]


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


# ---------- ninetrix ----------
def start_api(dirpath):
    proc = subprocess.Popen([BIN, "api", "--insecure-dev", "--listen", "127.0.0.1:0", "--database",
                             f"sqlite://{dirpath}/api.db"], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on (http://[0-9.:]+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    raise SystemExit("ninetrix api did not start")


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def ninetrix_conversation(base, turns, samples):
    t = str(uuid.uuid4())
    epoch = post(f"{base}/v1/runners/threads/{t}/claim", {})["epoch"]
    for n in range(turns):
        body = {"epoch": epoch, "parent_version": n, "append": [message("user", n), message("assistant", n)],
                "state": {"turn_seq": n + 1, "turn_start_history_len": 2 * n + 1, "status": "idle", "inbox_cursor": n + 1}}
        t0 = time.perf_counter()
        post(f"{base}/v1/runners/threads/{t}/checkpoints", body)
        samples.append(time.perf_counter() - t0)


# ---------- LangGraph ----------
def langgraph_conversation(saver, turns, samples, lock=None):
    from langgraph.checkpoint.base import empty_checkpoint
    thread = str(uuid.uuid4())
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    messages = []
    for n in range(turns):
        messages = messages + [message("user", n), message("assistant", n)]
        ckpt = empty_checkpoint()
        ckpt["id"] = str(uuid.uuid1())
        ckpt["channel_values"] = {"messages": messages}
        ckpt["channel_versions"] = {"messages": n + 1}
        t0 = time.perf_counter()
        config = saver.put(config, ckpt, {"source": "loop", "step": n, "parents": {}}, {"messages": n + 1})
        samples.append(time.perf_counter() - t0)


# ---------- raw floor ----------
def raw_conversation(path, turns, samples):
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE IF NOT EXISTS turns (thread TEXT, n INTEGER, body TEXT, PRIMARY KEY (thread, n))")
    thread = str(uuid.uuid4())
    for n in range(turns):
        body = json.dumps([message("user", n), message("assistant", n)])
        t0 = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO turns VALUES (?, ?, ?)", (thread, n, body))
        con.execute("COMMIT")
        samples.append(time.perf_counter() - t0)
    con.close()


def concurrently(k, fn):
    samples = []
    threads = [threading.Thread(target=fn, args=(samples,)) for _ in range(k)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return samples, time.perf_counter() - t0


def main():
    from langgraph.checkpoint.sqlite import SqliteSaver
    rows = []
    for label, k, turns in [("one 200-turn conversation", 1, 200), ("32 conversations × 50 turns, concurrent", 32, 50)]:
        results = {}
        with tempfile.TemporaryDirectory() as d:
            proc, base = start_api(d)
            try:
                samples, elapsed = concurrently(k, lambda s: ninetrix_conversation(base, turns, s))
            finally:
                proc.terminate()
                proc.wait()
            results["ninetrix API (HTTP, SQLite)"] = (samples, elapsed, dir_bytes(d))
        with tempfile.TemporaryDirectory() as d:
            with SqliteSaver.from_conn_string(os.path.join(d, "lg.db")) as saver:
                samples, elapsed = concurrently(k, lambda s: langgraph_conversation(saver, turns, s))
            results["LangGraph SqliteSaver (in process)"] = (samples, elapsed, dir_bytes(d))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "raw.db")
            sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()
            samples, elapsed = concurrently(k, lambda s: raw_conversation(path, turns, s))
            results["raw SQLite insert + commit (floor)"] = (samples, elapsed, dir_bytes(d))
        floor = results["raw SQLite insert + commit (floor)"]
        for name, (samples, elapsed, size) in results.items():
            rows.append((label, name, len(samples) / elapsed, pct(samples, 0.5) * 1e3, pct(samples, 0.99) * 1e3, size / 1e6,
                         (len(samples) / elapsed) / (len(floor[0]) / floor[1]), size / floor[2]))
    print("| scenario | store | writes/s | p50 ms | p99 ms | MB on disk | writes/s ÷ floor | bytes ÷ floor |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f} | {r[7]:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
