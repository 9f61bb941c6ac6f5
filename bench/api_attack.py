#!/usr/bin/env python3
"""Two rounds of attack findings (issues 20 and 33), replayed against a real `ninetrix api`.

An independent test of the checkpoint API (schemathesis, scripted races, slow clients, SIGKILLs)
reported ten findings. The suite has a test for each (api/tests/api/attack.rs,
tests/tests/api_slow_clients.rs, api/tests/api/openapi_contract.rs); this script replays the
reports' own reproductions over plain HTTP and raw sockets, with authentication on, on SQLite and
(with --postgres) on a fresh Postgres database, and prints one line per check: what the report saw,
what the server answers now, and PASS or FAIL. It exits 1 if any check fails.

    cargo build -p ninetrix-cli
    python3 bench/api_attack.py --bin target/x86_64-unknown-linux-gnu/debug/ninetrix \
        [--postgres postgres://postgres@127.0.0.1:55432/postgres] [--trials 30]

Round two (issue 33: labels a runner cannot rewrite, webhooks a stranger cannot abuse, work that
stays bounded, the low items, the OpenAPI document) lives in `bench/attack/`, one module per item;
each module's `run(ctx)` replays that item's reproductions through the same `check`. `--only NAME`
runs one round-two module (and skips round one).

It talks to loopback only; every process it starts is killed and every database it creates is
dropped before it exits.
"""

import argparse
import http.client
import json
import os
import random
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Round two: bench/attack/<name>.py, each with run(ctx); in issue 33's order.
ROUND_TWO = ["labels", "hooks", "work", "low", "spec"]

ADMIN = "admin-" + secrets.token_hex(16)
RESULTS = []


def check(name, ok, seen):
    RESULTS.append(ok)
    print(f"  {'PASS' if ok else 'FAIL'}  {name}: {seen}", flush=True)


class Api:
    """`ninetrix api` with a secret and an admin token, on a free loopback port."""

    def __init__(self, binary, database, work, extra=()):
        secret = os.path.join(work, "secret")
        admin = os.path.join(work, "admin")
        with open(secret, "w") as f:
            f.write(secrets.token_hex(32))
        with open(admin, "w") as f:
            f.write(ADMIN)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.proc = subprocess.Popen(
            [binary, "api", "--listen", f"127.0.0.1:{self.port}", "--database", database,
             "--secret-file", secret, "--admin-token-file", admin, *extra],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "api.log"), "ab"))
        deadline = time.monotonic() + 60
        while self.call("GET", "/healthz", token=None, quiet=True)[0] != 200:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the API did not come up; see {work}/api.log")
            time.sleep(0.05)

    def call(self, method, path, body=None, token=ADMIN, raw=None, headers=None, quiet=False):
        """(status, parsed JSON or None); status 0 when the connection failed."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = dict(headers or {})
        if token:
            h["authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            h.setdefault("content-type", "application/json")
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            text = resp.read()
        except OSError:
            if quiet:
                return 0, None
            raise
        finally:
            conn.close()
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:
            return resp.status, text

    def thread(self, **labels):
        """A new thread: (id, runner token, epoch)."""
        tid = str(uuid.uuid4())
        status, body = self.call("POST", "/v1/tokens/runner", {"thread_id": tid, **labels})
        assert status in (200, 201), (status, body)
        token = body["token"]
        status, body = self.call("POST", f"/v1/runners/threads/{tid}/claim", {}, token=token)
        assert status == 200, (status, body)
        return tid, token, body["epoch"]

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def message(text, role="user", blocks=None):
    return {"id": str(uuid.uuid4()), "role": role,
            "blocks": blocks if blocks is not None else [{"type": "text", "text": text}],
            "created_at": "2026-11-24T00:00:00Z"}


def state(turn):
    return {"turn_seq": turn, "turn_start_history_len": 0, "status": "in_turn", "inbox_cursor": 0}


def code(answer):
    status, body = answer
    return f"{status} {body.get('code') or '' if isinstance(body, dict) else ''}".strip()


# 1 and 2: purge against writers in flight, and what a purge leaves.
def purge_race(api, trials):
    bad, five_hundreds, written = [], 0, 0
    for trial in range(trials):
        tid, token, epoch = api.thread(pool="attack", agent="a")
        stop = threading.Event()
        statuses = []

        def writer():
            nonlocal written
            while not stop.is_set():
                s, latest = api.call("GET", f"/v1/runners/threads/{tid}/latest", token=token)
                parent = latest["version"] if s == 200 else 0
                s, b = api.call("POST", f"/v1/runners/threads/{tid}/commit", {
                    "epoch": epoch, "parent_version": parent, "append": [message(f"w{parent}")],
                    "state": state(parent + 1),
                    "intents": [{"key": f"k{uuid.uuid4().hex}", "turn_seq": parent + 1,
                                 "tool": "t", "args": {}, "effect": "write"}],
                    "outcomes": [], "events": [{"type": "note", "data": {}}]}, token=token)
                statuses.append(s)
                if s == 201:
                    written += 1
                if s in (410, 403) or s >= 500:
                    return

        writers = [threading.Thread(target=writer) for _ in range(3)]
        for w in writers:
            w.start()
        time.sleep(random.uniform(0.05, 0.3))
        purged = api.call("DELETE", f"/v1/threads/{tid}")
        time.sleep(0.05)
        stop.set()
        for w in writers:
            w.join()
        five_hundreds += sum(1 for s in statuses if s >= 500)
        after = {
            "admin read": api.call("GET", f"/v1/threads/{tid}"),
            "latest (old token)": api.call("GET", f"/v1/runners/threads/{tid}/latest", token=token),
            "claim (old token)": api.call("POST", f"/v1/runners/threads/{tid}/claim", {}, token=token),
            "commit (old epoch)": api.call("POST", f"/v1/runners/threads/{tid}/checkpoints", {
                "epoch": epoch, "parent_version": 0, "append": [message("late")],
                "state": state(1)}, token=token),
            "enqueue": api.call("POST", f"/v1/threads/{tid}/messages", {"content": "x"}),
            "new token": api.call("POST", "/v1/tokens/runner", {"thread_id": tid}),
            "purge again": api.call("DELETE", f"/v1/threads/{tid}"),
        }
        wrong = {k: code(v) for k, v in after.items() if code(v) != "410 purged"}
        if purged[0] != 204 or wrong or any(s >= 500 for s in statuses):
            bad.append((trial, code(purged), wrong))
    check(f"purge racing 3 writers, {trials} trials (report: 23/30 wedged on Postgres)",
          not bad and five_hundreds == 0,
          f"{len(bad)} trials wrong, {five_hundreds} server errors, {written} commits before the "
          f"purges; after each purge every read, write, claim, token and enqueue was 410 purged"
          + (f" — {bad[:3]}" if bad else ""))
    listed = api.call("GET", "/v1/threads?pool=attack")
    check("purged threads leave the listing", listed[0] == 200 and listed[1] == [],
          f"{listed[0]}, {len(listed[1] or [])} listed")


# 3: `latest` against a writer that replaces the history every version.
def snapshot_reads(api, seconds):
    tid, token, epoch = api.thread()
    stop = threading.Event()

    def writer():
        version = 0
        while not stop.is_set():
            s, _ = api.call("POST", f"/v1/runners/threads/{tid}/checkpoints", {
                "epoch": epoch, "parent_version": version, "truncate_to": 0,
                "append": [message(f"v{version + 1}")], "state": state(version + 1)}, token=token)
            assert s == 201, s
            version += 1

    reads, torn, errors = 0, [], 0
    w = threading.Thread(target=writer)
    w.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s, b = api.call("GET", f"/v1/runners/threads/{tid}/latest", token=token)
        if s == 404:
            continue
        if s != 200:
            errors += 1
            continue
        reads += 1
        texts = [m["blocks"][0]["text"] for m in b["history"]]
        if not (b["state"]["turn_seq"] == b["version"] and texts == [f"v{b['version']}"]):
            torn.append((b["version"], b["state"]["turn_seq"], texts))
    stop.set()
    w.join()
    check("latest is one snapshot beside a writer (report: 8.7 % torn on SQLite, 338 on Postgres)",
          reads > 0 and not torn and errors == 0,
          f"{reads} reads in {seconds} s, {len(torn)} torn, {errors} errors"
          + (f" — first {torn[0]}" if torn else ""))


# 4: U+0000 in every raw text field.
def nul(api):
    tid, token, epoch = api.thread()
    nul_ = "a\u0000b"
    probes = {
        "dedupe_key": api.call("POST", f"/v1/threads/{tid}/messages", {"content": "x", "dedupe_key": nul_}),
        "content": api.call("POST", f"/v1/threads/{tid}/messages", {"content": nul_}),
        "ledger key": api.call("POST", f"/v1/runners/threads/{tid}/tool-calls", {
            "epoch": epoch, "key": nul_, "turn_seq": 1, "tool": "t", "args": {}, "effect": "write"}, token=token),
        "ledger tool": api.call("POST", f"/v1/runners/threads/{tid}/tool-calls", {
            "epoch": epoch, "key": "k", "turn_seq": 1, "tool": nul_, "args": {}, "effect": "write"}, token=token),
        "ledger args": api.call("POST", f"/v1/runners/threads/{tid}/tool-calls", {
            "epoch": epoch, "key": "k2", "turn_seq": 1, "tool": "t", "args": {"a": nul_}, "effect": "write"}, token=token),
        "pool": api.call("POST", "/v1/tokens/runner", {"thread_id": str(uuid.uuid4()), "pool": nul_}),
        "agent": api.call("POST", "/v1/tokens/runner", {"thread_id": str(uuid.uuid4()), "agent": nul_}),
        "event type": api.call("POST", f"/v1/runners/threads/{tid}/events", {
            "epoch": epoch, "events": [{"type": nul_, "data": {}}]}, token=token),
        "event data": api.call("POST", f"/v1/runners/threads/{tid}/events", {
            "epoch": epoch, "events": [{"type": "note", "data": {"x": nul_}}]}, token=token),
        "history text": api.call("POST", f"/v1/runners/threads/{tid}/checkpoints", {
            "epoch": epoch, "parent_version": 0, "append": [message(nul_)], "state": state(1)}, token=token),
        "pool filter": api.call("GET", "/v1/threads?pool=a%00b"),
    }
    api.call("POST", f"/v1/runners/threads/{tid}/tool-calls", {
        "epoch": epoch, "key": "done", "turn_seq": 1, "tool": "t", "args": {}, "effect": "write"}, token=token)
    probes["ledger result"] = api.call("PUT", f"/v1/runners/threads/{tid}/tool-calls/done", {
        "epoch": epoch, "ok": True, "result": nul_}, token=token)
    field = {"dedupe_key": "`dedupe_key`", "content": "`content`", "ledger key": "`key`",
             "ledger tool": "`tool`", "ledger args": "`args.a`", "pool": "`pool`", "agent": "`agent`",
             "event type": "`events[0].type`", "event data": "`events[0].data.x`",
             "history text": "`append[0].blocks[0].text`", "pool filter": "pool",
             "ledger result": "`result`"}
    wrong = {k: f"{code(v)} {v[1].get('message', '') if isinstance(v[1], dict) else ''}"
             for k, v in probes.items()
             if code(v) not in ("422 invalid_text", "400 invalid_text")
             or field[k] not in (v[1] or {}).get("message", "")}
    check(f"U+0000 in {len(probes)} fields is invalid_text naming the field (report: 500 on Postgres)",
          not wrong, "all refused with the field named" if not wrong else wrong)
    return {k: code(v) for k, v in probes.items()}


# 5: slow and idle clients, oversized bodies, shutdown with a half-sent head.
def timeouts(binary, database, work):
    api = Api(binary, database, work, ["--header-timeout", "2", "--body-timeout", "2",
                                       "--idle-timeout", "3", "--shutdown-grace", "2"])
    try:
        def closed_after(send, limit):
            s = socket.create_connection(("127.0.0.1", api.port))
            s.settimeout(limit)
            started = time.monotonic()
            got = b""
            try:
                send(s)
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (socket.timeout, ConnectionResetError, BrokenPipeError):
                pass
            finally:
                s.close()
            return time.monotonic() - started, got

        def drip(s):
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            for i in range(40):
                # Stop dripping once the server has closed (the caller then reads the end).
                if select.select([s], [], [], 0.5)[0]:
                    return
                s.sendall(f"X-Drip-{i}: y\r\n".encode())

        took, _ = closed_after(drip, 15)
        check("a head that drips a line every 0.5 s is cut at --header-timeout 2 s (report: held forever)",
              took < 6, f"closed after {took:.1f} s")
        took, _ = closed_after(lambda s: None, 15)
        check("an idle connection closes at --idle-timeout 3 s", took < 7, f"closed after {took:.1f} s")
        head = (f"POST /v1/threads/{uuid.uuid4()}/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
                "Content-Type: application/json\r\nContent-Length: {n}\r\n\r\n")
        took, got = closed_after(lambda s: s.sendall(head.format(n=100).encode() + b"{"), 15)
        check("a body that stops after 1 of 100 bytes is 408 at --body-timeout 2 s",
              got.startswith(b"HTTP/1.1 408") and took < 6, f"{got[:12].decode(errors='replace')!r} after {took:.1f} s")
        took, got = closed_after(lambda s: s.sendall(head.format(n=99999999999).encode()), 15)
        check("Content-Length 99999999999 is 413 before any body byte",
              got.startswith(b"HTTP/1.1 413") and took < 1, f"{got[:12].decode(errors='replace')!r} after {took:.2f} s")
        held = socket.create_connection(("127.0.0.1", api.port))
        held.sendall(b"GET /v1/threads HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        api.proc.send_signal(signal.SIGTERM)
        try:
            api.proc.wait(timeout=20)
            took = time.monotonic() - started
        except subprocess.TimeoutExpired:
            took = None
        held.close()
        check("SIGTERM with a half-sent head held open (report: still running 35 s later)",
              took is not None and took < 5 and api.proc.returncode == 0,
              f"exited {api.proc.returncode} after {took:.2f} s" if took is not None else "still running at 20 s")
    finally:
        api.stop()


# 6 and 7: event batches and event types.
def events(api):
    tid, token, epoch = api.thread()
    big = [{"type": "n", "data": {}}] * 250_000  # 6.75 MB: under the 8 MiB body limit
    started = time.monotonic()
    answer = api.call("POST", f"/v1/runners/threads/{tid}/events", {"epoch": epoch, "events": big}, token=token)
    took = time.monotonic() - started
    check("250,000 events in one request are refused (report: held the SQLite writer 8 s)",
          code(answer) == "422 invalid_event", f"{code(answer)} in {took:.2f} s")
    answer = api.call("POST", f"/v1/runners/threads/{tid}/events", {"epoch": epoch, "events": big[:1000]}, token=token)
    check("1,000 events are the most one request may carry", answer[0] == 201, code(answer))
    bad = api.call("POST", f"/v1/runners/threads/{tid}/events", {
        "epoch": epoch, "events": [{"type": "a\nevent: x", "data": {}}]}, token=token)
    check("an event type with a line break is refused (report: stored, then the SSE stream panicked)",
          code(bad) == "422 invalid_event", code(bad))
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.request("GET", f"/v1/threads/{tid}/events/stream", headers={"authorization": f"Bearer {ADMIN}"})
    resp = conn.getresponse()
    seen = 0
    while seen < 1000:
        line = resp.fp.readline()
        if not line:
            break
        if line.startswith(b"id:"):
            seen += 1
    conn.close()
    check("the event stream replays every stored event", seen == 1000, f"{seen} of 1000")


# 8 and 9: inputs the schema forbids; authorization before validation.
def inputs(api):
    tid, token, epoch = api.thread()
    base = f"/v1/runners/threads/{tid}"
    call = {"type": "tool_call", "id": "c1", "name": "t", "args": {}}
    twice = message("x")
    cases = {
        "a JSON array as the body": (api.call("POST", f"{base}/claim", raw=b"[]", token=token), "422 invalid_body"),
        "args that are not an object": (api.call("POST", f"{base}/tool-calls", {
            "epoch": epoch, "key": "k", "turn_seq": 1, "tool": "t", "args": [1], "effect": "write"}, token=token),
            "422 invalid_body"),
        "event data that is not an object": (api.call("POST", f"{base}/events", {
            "epoch": epoch, "events": [{"type": "note", "data": 3}]}, token=token), "422 invalid_event"),
        "a tool result for an unknown call": (api.call("POST", f"{base}/checkpoints", {
            "epoch": epoch, "parent_version": 0, "state": state(1), "append": [
                message("", "tool", [{"type": "tool_result", "call_id": "nope", "content": "x"}])]},
            token=token), "422 invalid_history"),
        "duplicate message ids": (api.call("POST", f"{base}/checkpoints", {
            "epoch": epoch, "parent_version": 0, "state": state(1), "append": [twice, twice]},
            token=token), "422 invalid_history"),
        "a tool message with a text block": (api.call("POST", f"{base}/checkpoints", {
            "epoch": epoch, "parent_version": 0, "state": state(1), "append": [
                message("", "assistant", [call]), message("x", "tool")]}, token=token), "422 invalid_history"),
        "empty blocks": (api.call("POST", f"{base}/checkpoints", {
            "epoch": epoch, "parent_version": 0, "state": state(1), "append": [message("", "user", [])]},
            token=token), "422 invalid_history"),
        "replica 4294967296": (api.call("POST", "/v1/tokens/runner", {
            "thread_id": str(uuid.uuid4()), "replica": 4294967296}), "422 invalid_body"),
        "Last-Event-ID 9223372036854775808": (api.call("GET", f"/v1/threads/{tid}/events/stream",
                                                       headers={"last-event-id": "9223372036854775808"}),
                                              "400 invalid_header"),
        "inbox limit=0": (api.call("GET", f"{base}/inbox?limit=0", token=token), "400 invalid_query"),
    }
    first = {"epoch": epoch, "key": "same", "turn_seq": 1, "tool": "t", "args": {"a": 1}, "effect": "write"}
    api.call("POST", f"{base}/tool-calls", first, token=token)
    cases["a ledger key reused with other args"] = (
        api.call("POST", f"{base}/tool-calls", {**first, "args": {"a": 2}}, token=token), "409 key_reused")
    api.call("POST", f"/v1/threads/{tid}/messages", {"content": "one", "dedupe_key": "d"})
    reused = api.call("POST", f"/v1/threads/{tid}/messages", {"content": "two", "dedupe_key": "d"})
    cases["a dedupe_key reused with other content"] = (reused, "409 key_reused")
    key128 = "é" * 128
    cases["a ledger key of 128 two-byte characters"] = (api.call("POST", f"{base}/tool-calls", {
        **first, "key": key128}, token=token), "201")
    dedupe = api.call("POST", f"/v1/threads/{tid}/messages", {"content": "x", "dedupe_key": "k" * 129})
    cases["an over-long dedupe_key names dedupe_key"] = (
        (dedupe[0], {"code": dedupe[1]["code"] + ("" if "dedupe_key" in dedupe[1]["message"] else " (message names another field)")}),
        "422 invalid_key")
    other, other_token, _ = api.thread()
    for what, raw in {"no body": None, "a bad body": b"[", "wrong types": b'{"epoch": "x"}'}.items():
        answer = api.call("POST", f"/v1/runners/threads/{other}/checkpoints", token=token,
                          raw=raw if raw is not None else b"", headers={} if raw else {"content-type": "text/plain"})
        cases[f"another thread's route with {what}"] = (answer, "403 forbidden")
    for name, (answer, want) in cases.items():
        got = code(answer)
        check(name, got == want, got if got == want else f"{got} (want {want})")


# 10: the OpenAPI document.
def openapi(api):
    status, doc = api.call("GET", "/openapi.json", token=None)
    try:
        from openapi_spec_validator import validate
    except ImportError:
        print("  SKIP  openapi-spec-validator is not installed (pip install openapi-spec-validator)")
        return
    try:
        validate(doc)
        errors = 0
    except Exception as e:  # noqa: BLE001 — the validator's error is the finding
        errors = str(e).splitlines()[0]
    check("openapi-spec-validator accepts /openapi.json (report: 79 errors)", errors == 0,
          "valid OpenAPI 3.1" if errors == 0 else errors)
    query_in_path = [f"{route} {p['name']}" for route, item in doc["paths"].items()
                     for op in item.values() if isinstance(op, dict) for p in op.get("parameters", [])
                     if p["in"] == "path" and "{" + p["name"] + "}" not in route]
    check("no query parameter declared in: path (report: 11)", not query_in_path, query_in_path or "none")
    undescribed = sum(1 for path in doc["paths"].values() for op in path.values() if isinstance(op, dict)
                      for r in op.get("responses", {}).values() if "description" not in r)
    check("every response has a description (report: 68 without)", undescribed == 0, f"{undescribed} without")


def round_two(binary, database, work, only):
    """Issue 33's reproductions: each module gets the helpers through one context."""
    import importlib
    for name in ROUND_TWO:
        if only and name != only:
            continue
        module = importlib.import_module(f"attack.{name}")
        ctx = types.SimpleNamespace(binary=binary, database=database, work=work, check=check,
                                    Api=Api, ADMIN=ADMIN, message=message, state=state, code=code,
                                    postgres=database.startswith("postgres"))
        print(f"  round two: {name}")
        module.run(ctx)


def backend(binary, database, trials, seconds, only=None):
    work = tempfile.mkdtemp(prefix="ninetrix-attack-")
    statuses = {}
    if not only:
        api = Api(binary, database, work)
        try:
            purge_race(api, trials)
            snapshot_reads(api, seconds)
            statuses = nul(api)
            events(api)
            inputs(api)
            openapi(api)
        finally:
            api.stop()
        timeouts(binary, database, work)
    round_two(binary, database, work, only)
    return statuses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--postgres", help="a Postgres server URL; a fresh database is made on it and dropped")
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=5, help="how long the snapshot race runs")
    ap.add_argument("--only", choices=ROUND_TWO, help="run one round-two module, nothing else")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        print("SQLite")
        sqlite = backend(args.bin, f"sqlite://{d}/api.db", args.trials, args.seconds, args.only)
    if args.postgres:
        name = "attack_" + secrets.token_hex(4)
        subprocess.run(["psql", args.postgres, "-qc", f"CREATE DATABASE {name}"], check=True)
        try:
            print("Postgres")
            url = args.postgres.rsplit("/", 1)[0] + "/" + name
            postgres = backend(args.bin, url, args.trials, args.seconds, args.only)
            differ = {k: (sqlite[k], postgres[k]) for k in sqlite if sqlite[k] != postgres[k]}
            check("both backends answer U+0000 the same", not differ, differ or "identical")
        finally:
            subprocess.run(["psql", args.postgres, "-qc", f"DROP DATABASE {name} WITH (FORCE)"], check=True)
    failed = RESULTS.count(False)
    print(f"{len(RESULTS) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
