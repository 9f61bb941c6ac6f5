#!/usr/bin/env python3
"""The checkpoint API under a heavy caller, measured (issue 20): what one caller's largest writes
cost every other thread, and what reads cost now that each is one read transaction.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory; `local_ninetrix.py`), then:

1. head-of-line — a victim thread commits a one-message checkpoint every 20 ms for D seconds, alone
   and then while H heavy callers each post the largest event batch a request may carry (1,000
   events of ~200 bytes of data) as fast as they can: the victim's latency p50 / p99 / max both
   ways, and events stored per second. (Before the cap, one 250,000-event request held the SQLite
   writer 8 s and a checkpoint on another thread waited 7 s behind it.)
2. reads — R readers `GET …/latest` of a thread with a 200-message history for D seconds while a
   writer commits a version every 50 ms: reads per second and latency p50 / p99.

It talks to loopback only; every process it starts is killed before it exits.

    cargo build -p ninetrix-cli --release
    python3 bench/api_limits.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix
"""

import argparse
import json
import threading
import time
import urllib.request
import uuid

from local_ninetrix import LocalNinetrix


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(req) as resp:
        answer = json.loads(resp.read() or b"null")
    return answer, time.perf_counter() - started


def get(url, path):
    started = time.perf_counter()
    with urllib.request.urlopen(url + path) as resp:
        resp.read()
    return time.perf_counter() - started


def message(text):
    return {"id": str(uuid.uuid4()), "role": "user", "blocks": [{"type": "text", "text": text}],
            "created_at": "2026-11-24T00:00:00Z"}


def state(turn):
    return {"turn_seq": turn, "turn_start_history_len": 0, "status": "in_turn", "inbox_cursor": 0}


def claim(local):
    thread = str(uuid.uuid4())
    epoch = local.call("POST", f"/v1/runners/threads/{thread}/claim", {})["epoch"]
    return thread, epoch


def victim(local, seconds, stop_early=None):
    """One-message checkpoints every 20 ms; their latencies."""
    thread, epoch = claim(local)
    latencies, version = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop_early and stop_early.is_set()):
        body = {"epoch": epoch, "parent_version": version, "append": [message(f"v{version + 1}")],
                "state": state(1)}
        _, took = post(local.url, f"/v1/runners/threads/{thread}/checkpoints", body)
        latencies.append(took)
        version += 1
        time.sleep(0.02)
    return latencies


def heavy(local, stop, stored):
    thread, epoch = claim(local)
    batch = [{"type": "tool_call", "data": {"tool": "shell", "preview": "x" * 160}}] * 1000
    while not stop.is_set():
        post(local.url, f"/v1/runners/threads/{thread}/events", {"epoch": epoch, "events": batch})
        stored[0] += 1000


def head_of_line(local, seconds, heavies):
    alone = victim(local, seconds)
    stop, stored = threading.Event(), [0]
    threads = [threading.Thread(target=heavy, args=(local, stop, stored)) for _ in range(heavies)]
    for t in threads:
        t.start()
    started = time.monotonic()
    loaded = victim(local, seconds)
    elapsed = time.monotonic() - started
    stop.set()
    for t in threads:
        t.join()
    ms = lambda v: f"{v * 1000:.1f} ms"
    print(f"head-of-line: victim checkpoint alone       p50 {ms(pct(alone, .5))}  p99 {ms(pct(alone, .99))}  max {ms(max(alone))}  ({len(alone)} commits)")
    print(f"head-of-line: with {heavies} callers of 1,000-event batches p50 {ms(pct(loaded, .5))}  p99 {ms(pct(loaded, .99))}  max {ms(max(loaded))}  ({len(loaded)} commits)")
    print(f"head-of-line: events stored meanwhile       {stored[0] / elapsed:,.0f}/s")


def reads(local, seconds, readers):
    thread, epoch = claim(local)
    history = [message(f"m{i} " + "y" * 200) for i in range(200)]
    post(local.url, f"/v1/runners/threads/{thread}/checkpoints",
         {"epoch": epoch, "parent_version": 0, "append": history, "state": state(1)})
    stop, latencies, lock = threading.Event(), [], threading.Lock()

    def writer():
        version = 1
        while not stop.is_set():
            post(local.url, f"/v1/runners/threads/{thread}/checkpoints",
                 {"epoch": epoch, "parent_version": version, "append": [message(f"w{version}")], "state": state(1)})
            version += 1
            time.sleep(0.05)

    def reader():
        mine = []
        while not stop.is_set():
            mine.append(get(local.url, f"/v1/runners/threads/{thread}/latest"))
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(readers)]
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    print(f"reads: {readers} readers of a 200-message thread beside a writer: {len(latencies) / seconds:,.0f} reads/s, "
          f"p50 {pct(latencies, .5) * 1000:.2f} ms, p99 {pct(latencies, .99) * 1000:.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/x86_64-unknown-linux-gnu/release/ninetrix")
    ap.add_argument("-d", "--seconds", type=float, default=10)
    ap.add_argument("--heavy", type=int, default=4, help="callers posting 1,000-event batches")
    ap.add_argument("--readers", type=int, default=4)
    args = ap.parse_args()
    with LocalNinetrix(args.bin) as local:
        head_of_line(local, args.seconds, args.heavy)
        reads(local, args.seconds, args.readers)


if __name__ == "__main__":
    main()
