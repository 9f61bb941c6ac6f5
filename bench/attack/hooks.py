"""Issue 33, round two, item 2 (and item 5's and 6's webhook parts): a stranger with a webhook URL
and no secret (see bench/api_attack.py).

Each check replays the report's reproduction against a fresh `ninetrix api` and says what the
server answers now: junk that spends no rate-limit token and costs no history row each, a trickled
body that cannot fill `--max-connections`, memory that comes back after a burst of 8 MiB bodies,
and the low items (replays, delivery ids, dedupe per trigger, big numbers, registrations,
details, Content-Type, the OpenAPI document).
"""

import concurrent.futures
import hashlib
import hmac
import json
import os
import socket
import time
import uuid

SECRET = "hooks-attack-secret-0123456789"
POOL = "hk"


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def sign(body):
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def webhook(name, message="{{ text }}", session=None, rate=60, max_body=1 << 20, **kind):
    spec = {"name": name, "agent": "a", "session": session or {"key": f"trigger:{name}"},
            "kind": {"type": "webhook", "path": name, "message": message, "secret": "HOOK_SECRET",
                     "signature": "github", "tolerance_secs": 300,
                     "rate_limit_per_minute": rate, "max_body_bytes": max_body, **kind}}
    return {"spec": spec, "secret": SECRET}


def register(api, *triggers):
    status, body = api.call("PUT", f"/v1/pools/{POOL}/triggers", {"triggers": list(triggers)})
    assert status == 200, (status, body)


def deliver(api, name, body, signature=True, delivery=None, content_type="application/json",
            extra=None):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": content_type} if content_type else {}
    if signature is True:
        headers["x-hub-signature-256"] = sign(raw)
    elif signature:
        headers["x-hub-signature-256"] = signature
    if delivery is not None:
        headers["x-github-delivery"] = delivery
    headers.update(extra or {})
    return api.call("POST", f"/v1/hooks/{POOL}/{name}", raw=raw, token=None, headers=headers)


def history(api, name):
    status, body = api.call("GET", f"/v1/pools/{POOL}/triggers/{name}/history?limit=1000")
    assert status == 200, (status, body)
    return body


def raw_post(port, name, length, signature, first=b"", timeout=5.0):
    """A socket that sent a hook request head (and `first` bytes of its body)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = (f"POST /v1/hooks/{POOL}/{name} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n")
    if signature:
        head += f"x-hub-signature-256: {signature}\r\n"
    s.sendall(head.encode() + b"\r\n" + first)
    return s


def push_body(port, name, size, signature):
    """Sends a whole `size`-byte body (as a stranger would), whatever the server says; the status."""
    try:
        s = raw_post(port, name, size, signature, timeout=30)
        chunk = b"x" * (256 * 1024)
        sent = 0
        try:
            while sent < size:
                s.sendall(chunk[: min(len(chunk), size - sent)])
                sent += len(chunk)
        except OSError:
            pass
        try:
            line = s.recv(64).split(b" ")
            return int(line[1]) if len(line) > 1 else 0
        except (OSError, ValueError):
            return 0
        finally:
            s.close()
    except OSError:
        return 0


def health(port):
    """`GET /healthz` with a 5 s deadline: (status, None), 0 when it does not answer."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        line = s.recv(64).split(b" ")
        s.close()
        return (int(line[1]) if len(line) > 1 else 0), None
    except (OSError, ValueError):
        return 0, None


def junk_and_rate(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work)
    try:
        register(api, webhook("rl", rate=60))
        statuses = [deliver(api, "rl", {"text": "junk"}, signature=False)[0] for _ in range(61)]
        statuses += [deliver(api, "rl", {"text": "junk"}, signature="sha256=" + "0" * 64)[0]
                     for _ in range(61)]
        good = deliver(api, "rl", {"text": "hi"}, delivery=str(uuid.uuid4()))
        ctx.check("a signed delivery after 122 junk ones is taken, not 429 (report: 429 after 61)",
                  good[0] == 202, f"junk {sorted(set(statuses))}, then signed: {ctx.code(good)}")
        rows = [e for e in history(api, "rl") if e["outcome"] == "rejected"]
        stands = sum(e.get("refusals") or 0 for e in rows)
        ctx.check("122 junk deliveries cost at most 2 history rows, counted (report: one row each)",
                  len(rows) <= 2 and stands >= 1,
                  f"{len(rows)} rejected rows standing for {stands} refusals")
    finally:
        api.stop()


def trickle(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work,
                  ["--max-connections", "24", "--hook-body-timeout", "3"]
                  if ctx.new_flags else ["--max-connections", "24"])
    socks = []
    try:
        register(api, webhook("tr"))
        for _ in range(40):
            try:
                socks.append(raw_post(api.port, "tr", 1000, "sha256=" + "0" * 64, b"{", timeout=2))
            except OSError:
                break
        started = time.monotonic()
        status, _ = health(api.port)
        took = time.monotonic() - started
        ctx.check("/healthz answers while a stranger trickles 40 hook bodies "
                  "(--max-connections 24; report: never)",
                  status == 200 and took < 5, f"{status} in {took:.1f} s")
        # The trickled ones that were let in end within the hook body deadline.
        s = socks[0]
        s.settimeout(15)
        started = time.monotonic()
        try:
            answer = s.recv(64)
        except OSError:
            answer = b""
        took = time.monotonic() - started
        ctx.check("a trickled hook body is cut at the hook body deadline (3 s; report: held on)",
                  answer.startswith(b"HTTP/1.1 408") or answer.startswith(b"HTTP/1.1 429"),
                  f"{answer[:12]!r} after {took:.1f} s")
    finally:
        for s in socks:
            s.close()
        api.stop()


def memory(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work)
    try:
        register(api, webhook("mem", max_body=8 << 20, rate=60000))
        size = (8 << 20) - 1024
        before = rss_mib(api.proc.pid)
        with concurrent.futures.ThreadPoolExecutor(100) as pool:
            unsigned = list(pool.map(lambda _: push_body(api.port, "mem", size, None), range(100)))
        time.sleep(1)  # not waiting for state: letting the allocator settle before measuring
        after = rss_mib(api.proc.pid)
        ctx.check("100 unsigned 8 MiB bodies leave RSS within 64 MiB of where it was "
                  "(report: 30 -> 1,385 MiB)", after - before < 64,
                  f"{before:.0f} -> {after:.0f} MiB; answers {sorted(set(unsigned))}")
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            wrong = list(pool.map(lambda _: push_body(api.port, "mem", size, "sha256=" + "0" * 64),
                                  range(100)))
        time.sleep(1)
        peak = rss_mib(api.proc.pid)
        ctx.check("100 wrongly signed 8 MiB bodies leave RSS within 256 MiB of the start",
                  peak - before < 256,
                  f"{before:.0f} -> {peak:.0f} MiB; answers {sorted(set(wrong))}")
    finally:
        api.stop()


def low_items(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work)
    try:
        register(api,
                 webhook("rep", rate=1000),
                 webhook("chat", session={"key": "chat-{{ chat }}"}, rate=1000),
                 webhook("new", session="new", rate=1000),
                 webhook("num", session={"key": "n-{{ n }}"}, rate=1000),
                 webhook("keys", message="{{ missing }}", rate=1000))
        body = {"text": "replayed", "nonce": str(uuid.uuid4())}
        first = deliver(api, "rep", body, delivery=str(uuid.uuid4()))
        again = deliver(api, "rep", body, delivery=str(uuid.uuid4()))
        bare = {"text": "no id", "nonce": str(uuid.uuid4())}
        bare1, bare2 = deliver(api, "rep", bare), deliver(api, "rep", bare)
        ctx.check("a GitHub delivery replayed under a new or no delivery id is a duplicate "
                  "(report: taken again)",
                  first[0] == 202 and again[0] == 200 and bare1[0] == 202 and bare2[0] == 200,
                  f"new id: {first[0]} then {again[0]}; no id: {bare1[0]} then {bare2[0]}")
        same = str(uuid.uuid4())
        a = deliver(api, "chat", {"text": "x", "chat": 1}, delivery=same)
        b = deliver(api, "chat", {"text": "y", "chat": 2}, delivery=same)
        ctx.check("one delivery id is one delivery per trigger, whatever session it names "
                  "(report: per session)", a[0] == 202 and b[0] == 200, f"{a[0]} then {b[0]}")
        tab = deliver(api, "new", {"text": "t"}, delivery="a\tb")
        long = deliver(api, "new", {"text": "l"}, delivery="x" * 150)
        refused = [r for r in (tab, long) if r[0] >= 400 and isinstance(r[1], dict) and r[1].get("code")]
        ctx.check("`session: new` delivery ids with a tab or 150 characters are refused with a code",
                  len(refused) == 2, f"tab: {ctx.code(tab)}; 150 chars: {ctx.code(long)}")
        raw = b'{"text": "n", "n": 12345678901234567890123}'
        num = deliver(api, "num", raw, delivery=str(uuid.uuid4()))
        session = num[1].get("session") if isinstance(num[1], dict) else None
        ctx.check("a number past 2^64 renders as sent (report: its digits lost)",
                  session == "n-12345678901234567890123", f"{num[0]} session {session}")
        nul = deliver(api, "keys", b'{"a\\u0000b": 1}', delivery=str(uuid.uuid4()))
        huge = deliver(api, "keys", json.dumps({"k" * 1_000_000: 1}).encode(),
                       delivery=str(uuid.uuid4()))
        rows = [e for e in history(api, "keys") if e.get("reason") == "template"]
        longest = max([len(e.get("detail") or "") for e in rows] + [0])
        echoed = len(json.dumps(huge[1]))
        ctx.check("refusals with U+0000 and 1 MB keys are recorded, clipped "
                  "(report: not recorded on Postgres; 1 MB echoed)",
                  nul[0] == 422 and len(rows) == 2 and longest < 5000 and echoed < 5000,
                  f"{len(rows)} of 2 recorded; longest detail {longest} chars; answer {echoed} bytes")
        text = deliver(api, "rep", {"text": "plain", "nonce": str(uuid.uuid4())},
                       delivery=str(uuid.uuid4()), content_type="text/plain")
        ctx.check("a delivery that is not application/json is 415 (report: taken)",
                  text[0] == 415 and text[1].get("code") == "unsupported_media_type", ctx.code(text))

        def put(*triggers):
            return api.call("PUT", "/v1/pools/reg/triggers", {"triggers": list(triggers)})

        def schedule(**kind):
            return {"spec": {"name": "s", "agent": "a", "session": {"key": "trigger:s"},
                             "kind": {"type": "schedule", "timezone": "UTC", "message": "m",
                                      "overlap": "skip", "catch_up": "last",
                                      "catch_up_window_secs": 3600, **kind}}}
        answers = {
            "max_body 20 MiB > --body-limit 8 MiB": put(webhook("big", max_body=20 << 20)),
            "cron + every": put(schedule(cron="0 9 * * *", every_secs=60)),
            "timezone on every": put(schedule(every_secs=60, timezone="Europe/Lisbon")),
            "a 200 KiB template": put(webhook("tpl", message="x" * (200 << 10))),
        }
        bad = {k: ctx.code(v) for k, v in answers.items() if ctx.code(v) != "422 invalid_trigger"}
        named = "max_body" in json.dumps(answers["max_body 20 MiB > --body-limit 8 MiB"][1])
        ctx.check("registrations the agentfile refuses are 422 invalid_trigger (report: 200)",
                  not bad and named, bad or "all 422 invalid_trigger, max_body named")
        status, doc = api.call("GET", "/openapi.json", token=None)
        schemas = doc["components"]["schemas"]
        name_pattern = schemas.get("TriggerSpec", {}).get("properties", {}).get("name", {}).get("pattern")
        kinds = schemas.get("TriggerKind", {}).get("oneOf", [])
        closed = [k.get("additionalProperties") is False for k in kinds]
        ctx.check("the document gives trigger names their pattern and closes TriggerKind's branches",
                  bool(name_pattern) and closed and all(closed),
                  f"pattern {name_pattern!r}; branches closed {closed}")
    finally:
        api.stop()


def run(ctx):
    import subprocess
    usage = subprocess.run([ctx.binary, "api", "--help"], capture_output=True, text=True).stdout
    ctx.new_flags = "--hook-body-timeout" in usage
    junk_and_rate(ctx)
    trickle(ctx)
    memory(ctx)
    low_items(ctx)
