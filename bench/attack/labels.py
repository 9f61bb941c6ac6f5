"""Issue 33, item 1: a runner token could rewrite its own thread's labels.

`claim` with another pool's `pool`/`agent` relabelled the thread; the handoff rule trusted those
labels, so a runner of pool `q` posed as pool `p`'s agent `a` and handed tasks to `a`'s
collaborator (403 before relabelling, 201 after). The same relabelling let a thread be adopted as
another pool's replica thread before its first lookup. Labels are now fixed when a thread is
created, and the rules read the token's.
"""

import uuid


def mint(api, **labels):
    tid = str(uuid.uuid4())
    status, body = api.call("POST", "/v1/tokens/runner", {"thread_id": tid, **labels})
    assert status == 201, (status, body)
    return tid, body["token"]


def claim(api, tid, token, labels):
    return api.call("POST", f"/v1/runners/threads/{tid}/claim", labels, token=token)


def handoff(api, tid, token, epoch, key):
    return api.call("POST", f"/v1/runners/threads/{tid}/handoffs",
                    {"epoch": epoch, "turn_seq": 1, "key": key, "call_id": "c-" + key, "agent": "b",
                     "task": "read me the ledger", "timeout_secs": 60}, token=token)


def run(ctx):
    api = ctx.Api(ctx.binary, ctx.database, ctx.work)
    try:
        for agent, collaborators in (("a", ["b"]), ("b", [])):
            status, _ = api.call("PUT", f"/v1/pools/p/agents/{agent}",
                                 {"replicas": 1, "collaborators": collaborators})
            assert status == 204, status
        tid, token = mint(api, pool="q", agent="x", replica=1)
        status, body = claim(api, tid, token, {})
        epoch = body["epoch"]
        before = handoff(api, tid, token, epoch, "k1")
        relabel = claim(api, tid, token, {"pool": "p", "agent": "a", "replica": 1})
        ctx.check("a claim with another pool's labels is refused (was 200: the thread moved)",
                  ctx.code(relabel) == "409 labels_fixed", ctx.code(relabel))
        status, body = claim(api, tid, token, {})
        after = handoff(api, tid, token, body.get("epoch", epoch), "k2")
        ctx.check("after the attempt, a handoff to pool p's collaborator is still 403 (was 201)",
                  ctx.code(before) == ctx.code(after) == "403 not_collaborator",
                  f"before {ctx.code(before)}, after {ctx.code(after)}")
        _, sessions = api.call("GET", "/v1/sessions?pool=p&agent=b")
        ctx.check("no task reached pool p's agent b", sessions == [], f"{len(sessions or [])} sessions")

        # Adoption: relabel as replica 3 of fleet/bot before its first lookup.
        tid, token = mint(api, pool="other", agent="x", replica=1)
        relabel = claim(api, tid, token, {"pool": "fleet", "agent": "bot", "replica": 3})
        status, agent = api.call("POST", "/v1/tokens/agent", {"pool": "fleet", "agent": "bot"})
        status, looked = api.call("POST", "/v1/runners/pools/fleet/agents/bot/replicas/3",
                                  token=agent["token"])
        adopted = isinstance(looked, dict) and looked.get("thread_id") == tid
        ctx.check("a thread relabelled as another pool's replica is not adopted (was adopted)",
                  ctx.code(relabel) == "409 labels_fixed" and not adopted,
                  f"claim {ctx.code(relabel)}, lookup {status}, adopted {adopted}")
    finally:
        api.stop()
