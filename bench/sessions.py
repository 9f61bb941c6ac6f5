#!/usr/bin/env python3
"""Sessions, measured: turns/s of many concurrent sessions on one replica, the replica's memory
with sessions idle, and how soon a session that moved to a new replica answers after the scale
change.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory) and replica processes of a
scripted agent (`ninetrix runner`, with the agent token) on loopback, then:

1. one replica (`max_concurrent_sessions` 64): N sessions opened, one message queued to each at
   once; wall time until every session has answered (each turn is one model round and one commit)
   → turns/s. The replica's RSS (from /proc) before, at the peak, and once every session is idle
   again: idle sessions leave memory, so what an idle session costs is (idle − before) / N.
2. scale 2 → 3: replicas 1–3 run with the count at 2; a message is queued to each session that
   will move to replica 3, the count is set to 3, and the time from there to each one's reply is
   taken.

Every process it starts is killed before it exits (`local_ninetrix.py`).

    cargo build -p ninetrix-cli --release
    python3 bench/sessions.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 500
"""

import argparse
import time

from local_ninetrix import LocalNinetrix

POOL = "bench"
AGENT = "bot"


def spec(max_sessions):
    return {
        "name": AGENT,
        "metadata": {"name": None, "description": None, "role": "bench", "goal": None, "instructions": None, "constraints": []},
        "runtime": {"provider": "scripted", "via": None, "model": "scripted", "base_url": None, "api_key_secret": None,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": None,
                    "resources": {"cpu": None, "memory_bytes": None}, "script": [{"text": "Hello.", "tool_calls": []}]},
        "tools": [],
        "execution": {"durability": True, "replicas": 1, "max_turns": 10, "task": None, "resume": "truncate",
                      "max_concurrent_sessions": max_sessions},
        "governance": {"max_budget_per_run": None}, "env": {}, "secrets": [],
    }


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def owner(key, replicas):
    """ninetrix_proto::sessions::owner, for choosing which sessions move (checked against the
    API's answer below)."""
    best, best_score = 1, -1
    for r in range(1, replicas + 1):
        h = 0xcbf29ce484222325
        for b in key.encode() + b"\xff" + r.to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 30
        h = (h * 0xbf58476d1ce4e5b9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 27
        h = (h * 0x94d049bb133111eb) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
        if h > best_score:
            best, best_score = r, h
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/x86_64-unknown-linux-gnu/release/ninetrix")
    ap.add_argument("-n", type=int, default=500, help="sessions on one replica")
    args = ap.parse_args()
    with LocalNinetrix(args.bin) as local:
        call = local.call

        def replica(n, max_sessions):
            p, _ = local.runner(spec(max_sessions), f"replica-{n}", AGENTFILE_POOL=POOL,
                                AGENTFILE_REPLICA=str(n), AGENTFILE_AGENT_TOKEN="insecure-dev")
            return p

        def done(thread, seq):
            # Status and cursor from one version (the thread row and `latest` read apart could
            # mix the end of one turn with the start of the next).
            state = local.state(thread)
            return bool(state) and state["status"] == "idle" and state["inbox_cursor"] >= seq

        # 1. Many sessions on one replica.
        call("PUT", f"/v1/pools/{POOL}/agents/{AGENT}", {"replicas": 1})
        one = replica(1, 64)
        threads = [call("POST", "/v1/sessions", {"pool": POOL, "agent": AGENT, "key": f"user-{i}"})["thread_id"]
                   for i in range(args.n)]
        time.sleep(1)
        before = rss_mb(one.pid)
        start = time.monotonic()
        for t in threads:
            call("POST", f"/v1/threads/{t}/messages", {"content": "hi"})
        peak = before
        pending = set(threads)
        while pending:
            peak = max(peak, rss_mb(one.pid))
            pending = {t for t in pending if not done(t, 1)}
            if pending:
                time.sleep(0.02)
        wall = time.monotonic() - start
        time.sleep(2)
        idle = rss_mb(one.pid)
        print(f"{args.n} sessions on one replica (64 at once): {args.n / wall:.0f} turns/s ({wall:.2f} s); "
              f"RSS {before:.1f} MB before, {peak:.1f} MB at the peak, {idle:.1f} MB with all idle "
              f"({(idle - before) * 1024 / args.n:.2f} KB per idle session)")
        one.kill()
        one.wait()

        # 2. Scale 2 -> 3: the sessions replica 3 wins.
        call("PUT", f"/v1/pools/{POOL}/agents/{AGENT}", {"replicas": 2})
        for n in (1, 2, 3):
            replica(n, 64)
        keys = [f"moving-{i}" for i in range(400)]
        moving = [k for k in keys if owner(k, 3) == 3][:50]
        moved = [call("POST", "/v1/sessions", {"pool": POOL, "agent": AGENT, "key": k})["thread_id"] for k in moving]
        time.sleep(1)
        t0 = time.monotonic()
        call("PUT", f"/v1/pools/{POOL}/agents/{AGENT}", {"replicas": 3})
        for t in moved:
            call("POST", f"/v1/threads/{t}/messages", {"content": "after the move"})
        firsts = {}
        while len(firsts) < len(moved):
            for t in moved:
                if t not in firsts and done(t, 1):
                    firsts[t] = time.monotonic() - t0
            time.sleep(0.005)
        waits = sorted(firsts.values())
        print(f"{len(moved)} sessions moved by 2 -> 3 replicas: first reply after the scale change "
              f"p50 {waits[len(waits) // 2] * 1000:.0f} ms, max {waits[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
