#!/usr/bin/env python3
"""The sessions-work route at scale (issue 33, item 4): N sessions with work spread over R
replicas; the latency of one replica's `GET /v1/runners/pools/{pool}/agents/{agent}/sessions`,
and the latency of a commit alone and while eight callers keep asking for work.

Starts a real `ninetrix api` (bench/api_attack.py's `Api`: a secret, an admin token, loopback) on
SQLite in a temporary directory or on a fresh Postgres database (dropped afterwards), opens N
sessions with one message each through the API (so each has work), records R replicas, then:

1. work: 50 calls, each for a replica drawn at random → p50, p99;
2. commit alone: a claimed thread commits one message per version for `--seconds` → p50, p99;
3. commit under load: the same while 8 threads call the work route back to back.

    cargo build -p ninetrix-cli --release
    python3 bench/sessions_scale.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 100000 -r 1000 \
        [--postgres postgres://postgres@127.0.0.1:55432/postgres]
"""

import argparse
import concurrent.futures
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_attack  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def line(what, ms):
    print(f"  {what}: p50 {statistics.median(ms):.1f} ms, p99 {pct(ms, 0.99):.1f} ms, max {max(ms):.1f} ms "
          f"({len(ms)} calls)", flush=True)


def run(binary, database, n, replicas, seconds):
    work = tempfile.mkdtemp(prefix="ninetrix-scale-")
    api = api_attack.Api(binary, database, work)
    try:
        assert api.call("PUT", "/v1/pools/shop/agents/bot", {"replicas": replicas})[0] == 204
        agent = api.call("POST", "/v1/tokens/agent", {"pool": "shop", "agent": "bot"})[1]["token"]

        def fill(i):
            s, t = api.call("POST", "/v1/sessions", {"pool": "shop", "agent": "bot", "key": f"customer-{i}"})
            assert s in (200, 201), (s, t)
            s, b = api.call("POST", f"/v1/threads/{t['thread_id']}/messages", {"content": "hi"})
            assert s == 201, (s, b)

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            list(pool.map(fill, range(n)))
        print(f"  setup: {n} sessions with a message each, {replicas} replicas, in {time.monotonic() - t0:.0f} s",
              flush=True)

        def ask():
            r = random.randint(1, replicas)
            t = time.monotonic()
            s, body = api.call("GET", f"/v1/runners/pools/shop/agents/bot/sessions?replica={r}", token=agent)
            assert s == 200, (s, body)
            return (time.monotonic() - t) * 1000

        line("one replica's work call", [ask() for _ in range(50)])

        tid, token, epoch = api.thread()

        def commits(version):
            ms = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                body = {"epoch": epoch, "parent_version": version, "append": [api_attack.message("m")],
                        "state": {"turn_seq": 1, "turn_start_history_len": 0, "status": "idle", "inbox_cursor": 0}}
                t = time.monotonic()
                s, b = api.call("POST", f"/v1/runners/threads/{tid}/commit", body, token=token)
                assert s == 201, (s, b)
                ms.append((time.monotonic() - t) * 1000)
                version += 1
            return ms, version

        alone, version = commits(0)
        line("commit alone", alone)
        stop = threading.Event()
        asked = []

        def load():
            while not stop.is_set():
                try:
                    asked.append(ask())
                except OSError:  # the client's 30 s timeout: counted as 30 s
                    asked.append(30_000.0)

        loaders = [threading.Thread(target=load) for _ in range(8)]
        for t in loaders:
            t.start()
        loaded, _ = commits(version)
        stop.set()
        for t in loaders:
            t.join()
        line("commit while 8 callers ask for work", loaded)
        line("  their work calls", asked)
    finally:
        api.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("-n", type=int, default=100_000, help="sessions, each with a message")
    ap.add_argument("-r", type=int, default=1000, help="replicas")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--postgres")
    args = ap.parse_args()
    if args.postgres:
        name = "scale_" + secrets.token_hex(4)
        subprocess.run(["psql", args.postgres, "-qc", f"CREATE DATABASE {name}"], check=True)
        try:
            print("Postgres")
            run(args.bin, args.postgres.rsplit("/", 1)[0] + "/" + name, args.n, args.r, args.seconds)
        finally:
            subprocess.run(["psql", args.postgres, "-qc", f"DROP DATABASE {name} WITH (FORCE)"], check=True)
    else:
        with tempfile.TemporaryDirectory() as d:
            print("SQLite")
            run(args.bin, f"sqlite://{d}/api.db", args.n, args.r, args.seconds)


if __name__ == "__main__":
    main()
