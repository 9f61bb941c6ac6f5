#!/usr/bin/env python3
"""Telemetry and streaming, measured: what OpenTelemetry export costs a turn, and what the
streamed reply costs.

Starts `ninetrix api --insecure-dev` (SQLite in a temporary directory; `local_ninetrix.py`) and,
for each setup, one `ninetrix runner` (the `scripted` model: a turn of two model rounds and one
`write` tool call), then sends N messages one at a time and times enqueue → the turn stored
`idle`:

- `off`: no `OTEL_*` variable (no exporter is built);
- `collector`: `OTEL_EXPORTER_OTLP_ENDPOINT` at a local OTLP/HTTP sink (a Python server that
  answers 200 and counts the protobuf requests and bytes it gets);
- `unreachable`: the endpoint is a closed port (every export fails).

It also reports the runner's CPU time per turn in each setup and the spans' bytes on the wire.
Every process it starts is killed before it exits; it talks to loopback only.

    cargo build -p ninetrix-cli --release
    python3 bench/telemetry.py --bin target/x86_64-unknown-linux-gnu/release/ninetrix -n 500
"""

import argparse
import http.server
import os
import socket
import threading
import time

from local_ninetrix import LocalNinetrix


def spec():
    script = [
        {"text": "Writing it down.", "tool_calls": [{"name": "file_write", "args": {"path": "log.txt", "content": "x\n", "mode": "append"}}]},
        {"text": "Done: the line is in log.txt.", "tool_calls": []},
    ]
    return {
        "name": "clerk",
        "metadata": {"name": None, "description": None, "role": "bench", "goal": None, "instructions": None, "constraints": []},
        "runtime": {"provider": "scripted", "via": None, "model": "scripted", "base_url": None, "api_key_secret": None,
                    "temperature": 0.2, "max_tokens": 1024, "tool_timeout_secs": 30, "image": None,
                    "resources": {"cpu": None, "memory_bytes": None}, "script": script},
        "tools": [{"name": "file_write", "effect": "idempotent", "effect_pinned": False}],
        "execution": {"durability": True, "replicas": 1, "max_turns": 10, "task": None, "resume": "truncate"},
        "governance": {"max_budget_per_run": None},
        "env": {}, "secrets": [],
    }


class Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes everything: counts requests and bytes."""
    requests = 0
    bytes = 0

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        self.rfile.read(n)
        Sink.requests += 1
        Sink.bytes += n
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(local, name, n, env):
    proc, thread = local.runner(spec(), name, **env)
    # Warm up: the first turn (claim, boot) is not timed.
    local.call("POST", f"/v1/threads/{thread}/messages", {"content": "warm up", "dedupe_key": "w"})
    wait_idle(local, thread, 1)
    cpu0 = cpu_seconds(proc.pid)
    times = []
    for i in range(n):
        started = time.perf_counter()
        local.call("POST", f"/v1/threads/{thread}/messages", {"content": f"message {i}", "dedupe_key": f"m{i}"})
        wait_idle(local, thread, i + 2)
        times.append(time.perf_counter() - started)
    cpu = cpu_seconds(proc.pid) - cpu0
    # The exporter sends what is queued every 500 ms: give it the time before the kill.
    time.sleep(1.5)
    proc.kill()
    proc.wait()
    return times, cpu


def wait_idle(local, thread, cursor):
    deadline = time.monotonic() + 30
    while True:
        state = local.state(thread)
        if state and state["inbox_cursor"] >= cursor and state["status"] == "idle":
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"turn {cursor} of {thread} did not finish in 30 s")
        time.sleep(0.001)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/x86_64-unknown-linux-gnu/release/ninetrix")
    ap.add_argument("-n", type=int, default=500, help="turns per setup")
    args = ap.parse_args()
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    collector = f"http://127.0.0.1:{sink.server_address[1]}"
    setups = [
        ("off", {}),
        ("collector", {"OTEL_EXPORTER_OTLP_ENDPOINT": collector}),
        ("unreachable", {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}),
    ]
    with LocalNinetrix(args.bin) as local:
        for name, env in setups:
            before = (Sink.requests, Sink.bytes)
            times, cpu = run(local, name, args.n, env)
            wire = ""
            if name == "collector":
                reqs, size = Sink.requests - before[0], Sink.bytes - before[1]
                wire = f"; {reqs} export requests, {size / (args.n + 1):.0f} bytes of spans a turn"
            print(f"{name:12s} {args.n} turns: enqueue → turn stored p50 {pct(times, .5):.2f} ms, "
                  f"p90 {pct(times, .9):.2f} ms, p99 {pct(times, .99):.2f} ms; runner CPU "
                  f"{cpu / args.n * 1000:.2f} ms a turn{wire}")
    sink.shutdown()


if __name__ == "__main__":
    main()
