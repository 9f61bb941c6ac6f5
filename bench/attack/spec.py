"""Issue 33, item 6: the OpenAPI document, exact.

schemathesis (`--checks all`) found the `Last-Event-ID` header documented as an integer *or
null* (so `Last-Event-ID: null` was schema-valid, and refused), and long-poll `wait` values
accepted far beyond what the server honours (`wait=9223372036854775806` held a request open).
Trigger names' pattern and closed `TriggerKind` branches are checked in hooks.py.
"""

import uuid


def run(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work, ["--max-wait", "1"])
    try:
        status, doc = api.call("GET", "/openapi.json", token=None)
        stream = doc["paths"]["/v1/threads/{thread_id}/events/stream"]["get"]["parameters"]
        header = next(p for p in stream if p["name"] == "Last-Event-ID")
        kinds = header["schema"].get("type")
        ctx.check("Last-Event-ID is documented as an integer, never null (was integer or null)",
                  kinds == "integer", kinds)
        waits = [p["schema"].get("maximum") for item in doc["paths"].values() for op in item.values()
                 for p in op.get("parameters", []) if p["name"] == "wait"]
        ctx.check("every long-poll's wait states its bound (was 2^63-1)",
                  waits and all(w == 3600 for w in waits), waits)
        tid, token, _ = api.thread(pool="p", agent="a", replica=1)
        answer = api.call("GET", f"/v1/runners/threads/{tid}/inbox?after=0&wait=9223372036854775806",
                          token=token)
        ctx.check("wait=9223372036854775806 is refused, not held (was 200 after --max-wait)",
                  ctx.code(answer) == "400 invalid_query", ctx.code(answer))
        answer = api.call("GET", f"/v1/threads/{uuid.uuid4()}/events/stream",
                          headers={"Last-Event-ID": "null"})
        ctx.check("Last-Event-ID: null is refused as invalid_header", ctx.code(answer) == "400 invalid_header",
                  ctx.code(answer))
    finally:
        api.stop()
