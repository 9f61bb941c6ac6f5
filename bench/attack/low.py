"""Issue 33, item 5 (the items outside webhooks and bounded work): the console's sign-in, the
HTTP layer's bare refusals, and names that were free text.

- The console's cookie was the raw token and still signed in after sign-out; its CSRF check took
  any value of X-Ninetrix-Console.
- The HTTP layer answered a malformed request line, a long target or a large head with a bare
  400/414/431 and no JSON error body.
- `..` and `/` reached pool names through percent-encoding; bidi and line-separator characters
  in session keys; ANSI escapes in approver names.
"""

import socket


def raw_answer(api, data):
    """The whole answer to one request sent byte for byte (the server closes the connection)."""
    s = socket.create_connection(("127.0.0.1", api.port), timeout=10)
    try:
        s.sendall(data)
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    finally:
        s.close()
    return answer


def raw(api, data):
    """(status, body bytes) of one request sent byte for byte."""
    head, _, body = raw_answer(api, data).partition(b"\r\n\r\n")
    status = int(head[9:12]) if len(head) >= 12 else 0
    return status, body


def console(ctx, api):
    body = ('{"token": "%s"}' % ctx.ADMIN).encode()
    answer = raw_answer(api, b"POST /console/session HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    cookie = ""
    for line in answer.split(b"\r\n"):
        if line.lower().startswith(b"set-cookie: ninetrix_console="):
            cookie = line.split(b"=", 1)[1].split(b";")[0].decode()
    ctx.check("the console's cookie is not the token (was the raw admin token)",
              bool(cookie) and ctx.ADMIN not in cookie,
              "the token" if ctx.ADMIN in cookie else f"{len(cookie)} characters")
    with_cookie = {"cookie": f"ninetrix_console={cookie}"}
    forged = api.call("PUT", "/v1/pools/p/agents/a", {"replicas": 1}, token=None,
                      headers={**with_cookie, "x-ninetrix-console": "anything"})
    ctx.check("a change riding on the cookie with X-Ninetrix-Console: anything is refused (was taken)",
              forged[0] == 403, ctx.code(forged))
    api.call("DELETE", "/console/session", token=None, headers={**with_cookie, "x-ninetrix-console": "1"})
    after = api.call("GET", "/v1/threads", token=None, headers=with_cookie)
    ctx.check("after sign-out the same cookie no longer signs in (was 200)",
              after[0] == 401, ctx.code(after))


def http_layer(ctx, api):
    cases = [
        ("a header without a colon", b"GET /v1/threads HTTP/1.1\r\nHost: t\r\nno colon\r\n\r\n", 400),
        ("a space in the target", b"GET /v1/thr eads HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        ("a 70,000-byte target", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414),
        ("200 headers", b"GET /v1/threads HTTP/1.1\r\nHost: t\r\n"
         + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + b"\r\n", 431),
    ]
    for name, data, want in cases:
        status, body = raw(api, data)
        ok = status == want and body.startswith(b'{"code":')
        ctx.check(f"the HTTP layer's {want} for {name} is a JSON error (was an empty body)",
                  ok, f"{status} {body[:80]!r}")


def names(ctx, api):
    for method, path in (("PUT", "/v1/pools/%2E%2E/agents/a"), ("PUT", "/v1/pools/a%2Fb/agents/a")):
        body = b'{"replicas": 1}'
        status, answer = raw(api, f"{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {ctx.ADMIN}\r\n"
                             f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                             f"Connection: close\r\n\r\n".encode() + body)
        ctx.check(f"pool name {path.split('/')[3]} through percent-encoding is refused (was 204)",
                  status == 400 and b"invalid_path" in answer, f"{status} {answer[:60]!r}")
    for key in ("admin\u202egnp.exe", "line\u2028two"):
        answer = api.call("POST", "/v1/sessions", {"pool": "p", "agent": "a", "key": key})
        odd = next(c for c in key if ord(c) > 0x2000)
        ctx.check(f"a session key with U+{ord(odd):04X} is refused (was created)",
                  answer[0] == 422, ctx.code(answer))
    answer = api.call("POST", "/v1/tokens/approver", {"pool": "p", "name": "\x1b[2J\x1b[31mroot"})
    ctx.check("an approver name with an ANSI escape is refused (was minted)", answer[0] == 422, ctx.code(answer))


def run(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work)
    try:
        console(ctx, api)
        http_layer(ctx, api)
        names(ctx, api)
    finally:
        api.stop()
