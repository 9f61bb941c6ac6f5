#!/usr/bin/env python3
"""Handoffs between agents, measured: what a durable handoff adds to a turn, how a chain grows,
and whether calls to several collaborators run at the same time.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory) and one replica process
per scripted agent (`ninetrix runner`, with the agent token, so each also serves its sessions)
on loopback, then, with N messages sent one after another to the first agent of each setup and
the time from enqueue to the finished turn taken for each:

1. solo: an agent that answers at once — one model round, one commit: the floor.
2. one handoff: lead → worker, each answering at once. The lead's turn is two model rounds
   around the call; the call is a commit of its intent, the API filing the task (a session
   opened, the task in its inbox), the worker's replica finding it (a long-poll), claiming the
   session, its turn, its reply on its final commit, the lead's long-poll woken, the outcome
   committed.
3. a chain of three: a → b → c.
4. fan-out: one response calls four collaborators, each of which sleeps 0.5 s: about 0.5 s if
   they run at the same time, 2 s if one after another.

Every process it starts is killed before it exits (`local_ninetrix.py`).

    cargo build -p ninetrix-cli --release
    python3 bench/handoffs.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 50
"""

import argparse
import statistics
import time

from local_ninetrix import LocalNinetrix

POOL = "bench"


def spec(name, collaborators, script, tools=()):
    tool_specs = [{"name": t, "effect": "read", "effect_pinned": False} for t in tools]
    tool_specs += [{"name": f"ask_{c}", "effect": "write", "effect_pinned": True, "handoff": {"agent": c}}
                   for c in collaborators]
    return {
        "name": name,
        "metadata": {"name": None, "description": None, "role": "bench", "goal": None, "instructions": None, "constraints": []},
        "runtime": {"provider": "scripted", "via": None, "model": "scripted", "base_url": None, "api_key_secret": None,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": None,
                    "resources": {"cpu": None, "memory_bytes": None}, "script": script},
        "tools": tool_specs,
        "execution": {"durability": True, "replicas": 1, "max_turns": 10, "task": None, "resume": "truncate"},
        "governance": {"max_budget_per_run": None}, "env": {}, "secrets": [],
        "collaborators": list(collaborators),
    }


def asking(*agents):
    """A script whose first response calls these collaborators, then answers."""
    calls = [{"name": f"ask_{a}", "args": {"task": f"task for {a}"}} for a in agents]
    return [{"text": None, "tool_calls": calls}, {"text": "done", "tool_calls": []}]


ANSWER = [{"text": "answer", "tool_calls": []}]
SLEEPY = [{"text": None, "tool_calls": [{"name": "sleep", "args": {"seconds": 0.5}}]},
          {"text": "slept", "tool_calls": []}]


def run(local, agents, first, n):
    """Starts a replica per agent (each recorded with its collaborators), sends `first` n messages
    one after another and returns each turn's latency in ms."""
    threads = {}
    for s in agents:
        local.call("PUT", f"/v1/pools/{POOL}/agents/{s['name']}",
                   {"replicas": 1, "collaborators": s["collaborators"]})
    for s in agents:
        _, thread = local.runner(s, f"{s['name']}", AGENTFILE_POOL=POOL, AGENTFILE_REPLICA="1",
                                 AGENTFILE_AGENT_TOKEN="insecure-dev")
        threads[s["name"]] = thread
    thread = threads[first]
    # Warm up (the runners boot, claim and connect).
    latencies = []
    for i in range(n + 2):
        t0 = time.monotonic()
        local.call("POST", f"/v1/threads/{thread}/messages", {"content": f"message {i}"})
        # Status and cursor from one version (the thread row and `latest` read apart could mix
        # the end of one turn with the start of the next).
        while True:
            state = local.state(thread)
            if state and state["status"] == "idle" and state["inbox_cursor"] >= i + 1:
                break
            time.sleep(0.001)
        if i >= 2:
            latencies.append((time.monotonic() - t0) * 1000)
    return latencies


def line(what, ms):
    ms = sorted(ms)
    p90 = ms[int(len(ms) * 0.9) - 1] if len(ms) >= 10 else ms[-1]
    print(f"{what}: p50 {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms ({len(ms)} turns)")
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/x86_64-unknown-linux-gnu/release/ninetrix")
    ap.add_argument("-n", type=int, default=50, help="turns per setup")
    args = ap.parse_args()
    results = {}
    for what, agents, first in [
        ("solo", [spec("solo", [], ANSWER)], "solo"),
        ("one handoff (lead -> worker)", [spec("lead", ["worker"], asking("worker")), spec("worker", [], ANSWER)], "lead"),
        ("chain of three (a -> b -> c)", [spec("a", ["b"], asking("b")), spec("b", ["c"], asking("c")), spec("c", [], ANSWER)], "a"),
        ("fan-out to four, each sleeping 0.5 s",
         [spec("boss", ["w1", "w2", "w3", "w4"], asking("w1", "w2", "w3", "w4"))]
         + [spec(w, [], SLEEPY, tools=["sleep"]) for w in ("w1", "w2", "w3", "w4")], "boss"),
    ]:
        with LocalNinetrix(args.bin) as local:
            results[what] = line(what, run(local, agents, first, args.n if "fan" not in what else max(5, args.n // 5)))
    solo = results["solo"]
    one = results["one handoff (lead -> worker)"]
    print(f"a handoff adds {one - 2 * solo:.1f} ms at p50 beyond the two agents' own turns "
          f"(one handoff {one:.1f} ms - 2 x solo {solo:.1f} ms)")


if __name__ == "__main__":
    main()
