"""A remote A2A agent for ninetrix's tests, served by the official Python SDK (a2a-sdk 1.3.0).

The runner's A2A client (runner/src/a2a.rs) is tested against this server, so what it checks is
the real SDK's wire format (A2A 1.0, JSON-RPC binding), not a fake of ours.

What it does with a message's text:
- "fail…"        -> the task ends FAILED, its status message "cannot do: <text>";
- "need input…"  -> the task stops INPUT_REQUIRED, its status message "which customer?";
- anything else  -> after A2A_DELAY seconds (default 0), COMPLETED with an artifact `reply`
                    holding "echo: <text>".

Settings (environment): A2A_TOKEN — when set, every request but the card's needs
`Authorization: Bearer <A2A_TOKEN>` (else 401); A2A_DELAY — seconds before an echo.

It listens on 127.0.0.1 on a free port and prints that port, alone on a line, once it serves.

`GET /stats` answers {"tasks": N, "by_message_id": {messageId: tasks created for it}, "auth":
[the Authorization headers seen]}, so a test can assert that a message sent again created no new
task, and that the bearer token was sent.

Why it dedupes itself: the SDK's DefaultRequestHandler (v2) makes a new task for every message
without `taskId`, whatever its `messageId` (default_request_handler_v2.py, _setup_active_task:
the request context builder generates a fresh task ID). A2A 1.0 lets a server treat a repeated
`messageId` as the same message, and ninetrix's own server does; a caller that resends after a
crash relies on it. So `DedupingHandler` keeps messageId -> task ID and answers a repeated
message with the task it made the first time (from the task store), creating nothing.
"""

import asyncio
import os
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers.proto_helpers import new_task, new_text_artifact, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    GetTaskRequest,
    Role,
    TaskState,
)

STATS = {"tasks": 0, "by_message_id": {}, "auth": []}


class Echo(AgentExecutor):
    """Echoes the text, fails on "fail", asks on "need input"."""

    async def execute(self, context: RequestContext, event_queue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = context.get_user_input()
        if context.current_task is None:
            # The SDK wants the task before any update of it.
            await event_queue.enqueue_event(
                new_task(
                    context.task_id,
                    context.context_id,
                    TaskState.TASK_STATE_SUBMITTED,
                    history=[context.message],
                )
            )
        await updater.start_work()
        if text.startswith("fail"):
            await updater.failed(self._say(updater, f"cannot do: {text}"))
            return
        if text.startswith("need input"):
            await updater.requires_input(self._say(updater, "which customer?"))
            return
        delay = float(os.environ.get("A2A_DELAY", "0"))
        if delay > 0:
            await asyncio.sleep(delay)
        await updater.add_artifact(
            new_text_artifact(name="reply", text=f"echo: {text}").parts,
            name="reply",
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()

    @staticmethod
    def _say(updater: TaskUpdater, text: str):
        return new_text_message(
            text, role=Role.ROLE_AGENT, context_id=updater.context_id, task_id=updater.task_id
        )


class DedupingHandler(DefaultRequestHandler):
    """The SDK's handler, answering a repeated messageId with the task it made (see above)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tasks_by_message_id: dict[str, str] = {}

    async def on_message_send(self, params, context):
        message_id = params.message.message_id
        # Read before the SDK's handler runs: it fills the message's `taskId` in.
        new_task_wanted = not params.message.task_id
        known = self._tasks_by_message_id.get(message_id) if new_task_wanted else None
        if known is not None:
            return await self.on_get_task(GetTaskRequest(id=known), context)
        result = await super().on_message_send(params, context)
        # By descriptor: the handler's Task class is not always `a2a.types.Task` itself.
        if new_task_wanted and result.DESCRIPTOR.name == "Task":
            self._tasks_by_message_id[message_id] = result.id
            STATS["tasks"] += 1
            STATS["by_message_id"][message_id] = STATS["by_message_id"].get(message_id, 0) + 1
        return result


class Bearer(BaseHTTPMiddleware):
    """Refuses requests without `Authorization: Bearer $A2A_TOKEN` (the card and /stats aside)."""

    async def dispatch(self, request: Request, call_next):
        token = os.environ.get("A2A_TOKEN")
        path = request.url.path
        if path.startswith("/.well-known/") or path == "/stats":
            return await call_next(request)
        header = request.headers.get("authorization")
        STATS["auth"].append(header)
        if token and header != f"Bearer {token}":
            return JSONResponse(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "unauthorized"}},
                status_code=401,
            )
        return await call_next(request)


async def stats(_request: Request) -> JSONResponse:
    return JSONResponse(STATS)


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    card = AgentCard(
        name="Echo",
        description="Echoes what it is sent",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/a2a",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes text", tags=["test"])],
    )
    handler = DedupingHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/a2a"),
        Route("/stats", stats, methods=["GET"]),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(Bearer)])
    config = uvicorn.Config(app, log_level="warning")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print(port, flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
