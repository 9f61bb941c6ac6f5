#!/usr/bin/env python3
"""Triggers, measured: how fast signed webhook deliveries are taken (each answer is a durable
commit of the message, its session and its history entry), how late the scheduler fires, and what
registered schedules cost an idle API.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory; `local_ninetrix.py`), then:

1. webhooks — registers a GitHub-signed webhook (one session per `chat.id`, 50 chats) and sends
   N signed deliveries from C concurrent senders, then N/10 redeliveries of ids already sent:
   latency of each answer (202 taken, 200 deduplicated) and deliveries per second;
2. schedules — registers S schedules firing every second (`overlap: allow`, each in its own
   session; 250 to a pool, a pool's most is 256) for D seconds: how many fired (their histories),
   when each tick planned them (`at - scheduled_at`), how soon after its second the last fire a
   tick writes could be read (a watcher polls the listing every 2 ms), and the API's CPU;
3. idle — replaces them with S schedules that are not due (`0 0 1 1 *`) and reads the API's CPU
   over `--idle` seconds: the scheduler's cost when nothing fires (one read a second).

No runner takes the messages (they queue in their sessions): this times the API's part. It talks
to loopback only; every process it starts is killed before it exits.

    cargo build -p ninetrix-cli --release
    python3 bench/triggers.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 2000
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import hmac
import json
import os
import threading
import time
import urllib.error
import urllib.request

from local_ninetrix import LocalNinetrix

SECRET = b"bench-webhook-secret"


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def deliver(url, delivery, chat):
    body = json.dumps({"text": f"delivery {delivery}", "chat": {"id": chat}}).encode()
    sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "content-type": "application/json", "x-hub-signature-256": sig, "x-github-delivery": delivery})
    started = time.perf_counter()
    with urllib.request.urlopen(req) as resp:
        resp.read()
        return resp.status, time.perf_counter() - started


def schedule(name, every=None, cron=None, session=None):
    kind = {"type": "schedule", "timezone": "UTC", "message": "tick", "overlap": "allow",
            "catch_up": "last", "catch_up_window_secs": 3600}
    if every:
        kind["every_secs"] = every
    if cron:
        kind["cron"] = cron
    return {"spec": {"name": name, "agent": "a", "session": {"key": session or f"trigger:{name}"}, "kind": kind}}


def webhooks(local, n, senders):
    local.call("PUT", "/v1/pools/bench/triggers", {"triggers": [{
        "spec": {"name": "hook", "agent": "a", "session": {"key": "chat-{{ chat.id }}"},
                 "kind": {"type": "webhook", "path": "hook", "message": "{{ text }}", "secret": "S",
                          "signature": "github", "tolerance_secs": 300, "rate_limit_per_minute": 60000,
                          "max_body_bytes": 65536}},
        "secret": SECRET.decode()}]})
    url = local.url + "/v1/hooks/bench/hook"
    cpu0 = cpu_seconds(local.api.pid)
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(senders) as pool:
        taken = list(pool.map(lambda i: deliver(url, f"d-{i}", i % 50), range(n)))
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(local.api.pid) - cpu0
    with concurrent.futures.ThreadPoolExecutor(senders) as pool:
        again = list(pool.map(lambda i: deliver(url, f"d-{i * 7 % n}", (i * 7 % n) % 50), range(n // 10)))
    assert all(s == 202 for s, _ in taken), "every first delivery is taken"
    assert all(s == 200 for s, _ in again), "every redelivery is deduplicated"
    lat = [t * 1000 for _, t in taken]
    dup = [t * 1000 for _, t in again]
    print(f"webhooks: {n} deliveries from {senders} senders in {elapsed:.2f} s = {n / elapsed:.0f}/s; "
          f"answer p50 {pct(lat, .5):.1f} ms, p99 {pct(lat, .99):.1f} ms, max {max(lat):.1f} ms; "
          f"API CPU {cpu:.2f} s ({cpu / n * 1000:.2f} ms a delivery); "
          f"{len(dup)} redeliveries deduplicated: p50 {pct(dup, .5):.1f} ms, p99 {pct(dup, .99):.1f} ms")


PER_POOL = 250  # a pool holds at most 256 triggers


def register(local, count, **rule):
    """`count` schedules named s<i>, PER_POOL to a pool (`bench-0`, `bench-1`, …)."""
    for start in range(0, count, PER_POOL):
        local.call("PUT", f"/v1/pools/bench-{start // PER_POOL}/triggers",
                   {"triggers": [schedule(f"s{i}", **rule) for i in range(start, min(count, start + PER_POOL))]})


def watch(local, pool, stop, seen):
    """Polls the triggers of `pool` every 2 ms; for each new fire of the pool's last trigger (the
    last one a tick writes: ticks go by pool and name), records how long after its scheduled
    second it could be read — committed and visible."""
    last = None
    while not stop.is_set():
        listed = local.call("GET", f"/v1/triggers?pool={pool}")
        entry = max(listed, key=lambda t: t["spec"]["name"])["last"] if listed else None
        if entry and entry.get("scheduled_at") and entry["scheduled_at"] != last:
            last = entry["scheduled_at"]
            due = datetime.datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp()
            seen.append((time.time() - due) * 1000)
        time.sleep(0.002)


def schedules(local, count, seconds):
    register(local, count, every=1)
    time.sleep(1.5)
    t0 = time.time()
    cpu0 = cpu_seconds(local.api.pid)
    time.sleep(seconds)
    cpu = cpu_seconds(local.api.pid) - cpu0
    t1 = time.time()
    # Then a few seconds with the watcher (its polling costs the API CPU, so it runs apart).
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch, args=(local, f"bench-{(count - 1) // PER_POOL}", stop, seen))
    watcher.start()
    time.sleep(10)
    stop.set()
    watcher.join()
    seen = seen[1:]  # the first may be from before the watch began
    late = []
    fired = 0
    for i in range(count):
        for e in local.call("GET", f"/v1/pools/bench-{i // PER_POOL}/triggers/s{i}/history?limit=1000"):
            if e["outcome"] not in ("fired", "caught_up"):
                continue
            due = datetime.datetime.fromisoformat(e["scheduled_at"].replace("Z", "+00:00"))
            if not t0 <= due.timestamp() < t1 - 1:
                continue
            fired += 1
            at = datetime.datetime.fromisoformat(e["at"].replace("Z", "+00:00"))
            late.append((at - due).total_seconds() * 1000)
    window = int(t1 - 1) - int(t0)
    print(f"schedules: {count} schedules every second: {fired} fires in the {window} whole seconds "
          f"measured ({fired / count / max(window, 1):.2f} per schedule-second); planned (the tick's "
          f"time) after their second: p50 {pct(late, .5):.0f} ms, p99 {pct(late, .99):.0f} ms; API CPU "
          f"{cpu:.2f} s over {seconds:.0f} s ({cpu / seconds * 100:.1f}% of a core, "
          f"{cpu / max(fired, 1) * 1000:.3f} ms a fire); the tick's last fire readable after its "
          f"second: p50 {pct(seen, .5):.0f} ms, p99 {pct(seen, .99):.0f} ms, max {max(seen):.0f} ms "
          f"({len(seen)} seconds watched)")


def idle(local, count, seconds):
    register(local, count, cron="0 0 1 1 *")
    time.sleep(2)
    cpu0 = cpu_seconds(local.api.pid)
    time.sleep(seconds)
    cpu = cpu_seconds(local.api.pid) - cpu0
    print(f"idle: {count} schedules not due, {seconds:.0f} s: API CPU {cpu:.3f} s "
          f"({cpu / seconds * 100:.2f}% of a core)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/x86_64-unknown-linux-gnu/release/ninetrix")
    ap.add_argument("-n", type=int, default=2000, help="webhook deliveries")
    ap.add_argument("-c", type=int, default=16, help="concurrent senders")
    ap.add_argument("-s", type=int, default=200, help="schedules")
    ap.add_argument("-d", type=float, default=20.0, help="seconds the schedules run")
    ap.add_argument("--idle", type=float, default=30.0, help="seconds to watch the idle API")
    args = ap.parse_args()
    with LocalNinetrix(args.bin) as local:
        webhooks(local, args.n, args.c)
        schedules(local, args.s, args.d)
        idle(local, args.s, args.idle)


if __name__ == "__main__":
    main()
