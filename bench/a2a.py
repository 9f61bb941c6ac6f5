#!/usr/bin/env python3
"""A2A (issue 43), measured: what a durable A2A task costs an A2A client.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory) and one replica process
of a scripted agent that answers at once (`local_ninetrix.py`), records the agent with its card,
then, over the JSON-RPC endpoint as any A2A 1.0 client would call it:

1. N blocking `SendMessage` calls one after another, all in one context (one session): each is
   the transaction that files the task (dedupe row, inbox message, task row), the replica's
   long-poll woken, its turn, its final commit, and the blocked request woken by that commit —
   the time to a `COMPLETED` task with its reply.
2. N `GetTask` calls of those tasks: a task's state read from its thread's events.
3. N blocking `SendMessage` calls again with the same `messageId`s: the dedupe path, which files
   nothing and answers the stored task.

    cargo build -p ninetrix-cli --release
    python3 bench/a2a.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 100
"""

import argparse
import json
import statistics
import time
import urllib.request
import uuid

from local_ninetrix import LocalNinetrix

POOL = "bench"
AGENT = "echo"
SPEC = {
    "name": AGENT,
    "metadata": {"name": None, "description": "answers at once", "role": "bench", "goal": None,
                 "instructions": None, "constraints": []},
    "runtime": {"provider": "scripted", "via": None, "model": "scripted", "base_url": None,
                "api_key_secret": None, "temperature": 0.2, "max_tokens": 1024,
                "tool_timeout_secs": 30, "image": None, "resources": {"cpu": None, "memory_bytes": None},
                "script": [{"text": "answer", "tool_calls": []}]},
    "tools": [],
    "execution": {"durability": True, "replicas": 1, "max_turns": 10, "task": None, "resume": "truncate"},
    "governance": {"max_budget_per_run": None}, "env": {}, "secrets": [],
}


def rpc(local, method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    r = urllib.request.Request(f"{local.url}/a2a/{POOL}/{AGENT}", data=body, method="POST",
                               headers={"content-type": "application/json", "A2A-Version": "1.0",
                                        "authorization": "Bearer insecure-dev"})
    with urllib.request.urlopen(r) as resp:
        answer = json.loads(resp.read())
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def timed(f):
    t0 = time.monotonic()
    out = f()
    return out, (time.monotonic() - t0) * 1000


def summary(name, ms):
    ms = sorted(ms)
    print(f"{name:<44} median {statistics.median(ms):6.1f} ms   p95 {ms[int(len(ms) * 0.95)]:6.1f} ms"
          f"   max {ms[-1]:6.1f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("-n", type=int, default=100)
    args = ap.parse_args()
    with LocalNinetrix(args.bin) as local:
        local.call("PUT", f"/v1/pools/{POOL}/agents/{AGENT}",
                   {"replicas": 1, "card": {"description": "answers at once"}})
        local.runner(SPEC, AGENT, AGENTFILE_POOL=POOL, AGENTFILE_REPLICA="1",
                     AGENTFILE_AGENT_TOKEN="insecure-dev")
        context = str(uuid.uuid4())
        ids = [f"bench-{i}" for i in range(args.n + 1)]

        def send(i):
            return rpc(local, "SendMessage", {"message": {
                "messageId": ids[i], "contextId": context, "role": "ROLE_USER",
                "parts": [{"text": f"message {i}"}]}})["task"]

        send(0)  # the session opens and the replica claims it
        tasks, sends = [], []
        for i in range(1, args.n + 1):
            task, ms = timed(lambda: send(i))
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            tasks.append(task["id"])
            sends.append(ms)
        gets = [timed(lambda: rpc(local, "GetTask", {"id": t}))[1] for t in tasks]
        resends = []
        for i in range(1, args.n + 1):
            task, ms = timed(lambda: send(i))
            assert task["id"] == tasks[i - 1], "a resent messageId names its task"
            resends.append(ms)
        print(f"{args.n} tasks, one context, a scripted agent that answers at once:")
        summary("SendMessage (blocking, to COMPLETED)", sends)
        summary("GetTask", gets)
        summary("SendMessage again (same messageId)", resends)


if __name__ == "__main__":
    main()
