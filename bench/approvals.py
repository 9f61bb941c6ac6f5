#!/usr/bin/env python3
"""Requests to people, measured: how soon a gated call's request is listed, how soon an approved
write runs after the decision, and what a turn waiting for a person costs in CPU.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory) and one `ninetrix runner`
(the `scripted` model; every `write` gated by `governance.human_approval`), then for each of N
messages: enqueue → poll `GET /v1/approvals` until the request is listed → approve → poll the
thread's events until the write's `tool_call` (executed) is stored — it rides on the commit of the
write's outcome, so this is decision → write run and its outcome durable. Then one more request
is left pending for `--idle` seconds while the CPU time of both processes is read from /proc.
Every process it starts is killed before it exits (`local_ninetrix.py`); it talks to loopback
only.

    cargo build -p ninetrix-cli --release
    python3 bench/approvals.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 200
"""

import argparse
import os
import time

from local_ninetrix import LocalNinetrix


def spec():
    script = [
        {"text": "Writing.", "tool_calls": [{"name": "file_write", "args": {"path": "log.txt", "content": "x\n", "mode": "append"}}]},
        {"text": "Done.", "tool_calls": []},
    ]
    return {
        "name": "clerk",
        "metadata": {"name": None, "description": None, "role": "bench", "goal": None, "instructions": None, "constraints": []},
        "runtime": {"provider": "scripted", "via": None, "model": "scripted", "base_url": None, "api_key_secret": None,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": None,
                    "resources": {"cpu": None, "memory_bytes": None}, "script": script},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": False}],
        "execution": {"durability": True, "replicas": 1, "max_turns": 10, "task": None, "resume": "truncate"},
        "governance": {"max_budget_per_run": None,
                       "human_approval": {"enabled": True, "actions": [], "effects": ["write"], "timeout_secs": 3600}},
        "env": {}, "secrets": [],
    }


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/x86_64-unknown-linux-gnu/release/ninetrix")
    ap.add_argument("-n", type=int, default=100, help="approved requests to time")
    ap.add_argument("--idle", type=float, default=60.0, help="seconds to watch a waiting turn")
    args = ap.parse_args()
    with LocalNinetrix(args.bin) as local:
        call = local.call
        runner, thread = local.runner(spec(), "ws")
        api = local.api
        workspace = local.workspace("ws")

        def pending():
            while True:
                found = call("GET", f"/v1/approvals?thread_id={thread}")
                if found:
                    return found[0]
                time.sleep(0.001)

        listed, decided, after = [], [], 0
        for i in range(args.n):
            t0 = time.monotonic()
            call("POST", f"/v1/threads/{thread}/messages", {"content": f"m{i}", "dedupe_key": f"k{i}"})
            request = pending()
            listed.append(time.monotonic() - t0)
            t1 = time.monotonic()
            call("POST", f"/v1/approvals/{request['id']}/decision", {"decision": "approve"})
            ran = False
            while not ran:
                for e in call("GET", f"/v1/threads/{thread}/events?after={after}"):
                    after = e["seq"]
                    ran |= e["type"] == "tool_call" and e["data"]["mode"] == "executed"
                if not ran:
                    time.sleep(0.001)
            decided.append(time.monotonic() - t1)
            while call("GET", f"/v1/threads/{thread}")["status"] != "idle":
                time.sleep(0.001)
        lines = open(os.path.join(workspace, "log.txt")).read().count("\n")
        assert lines == args.n, f"{lines} writes for {args.n} approvals"
        print(f"{args.n} approvals: enqueue -> request listed p50 {pct(listed, .5):.1f} ms, p99 {pct(listed, .99):.1f} ms; "
              f"decision -> write run and stored p50 {pct(decided, .5):.1f} ms, p99 {pct(decided, .99):.1f} ms")

        call("POST", f"/v1/threads/{thread}/messages", {"content": "idle", "dedupe_key": "idle"})
        pending()
        time.sleep(1)
        a, b = cpu_seconds(runner.pid), cpu_seconds(api.pid)
        time.sleep(args.idle)
        print(f"a turn waiting {args.idle:.0f} s for a person: runner {cpu_seconds(runner.pid) - a:.2f} CPU-s, "
              f"api {cpu_seconds(api.pid) - b:.2f} CPU-s")


if __name__ == "__main__":
    main()
