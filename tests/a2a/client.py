"""The official A2A Python SDK's client, driven from the command line by tests/tests/a2a.rs.

Each command resolves the agent card at URL (the agent's base URL: the card is read from
URL/.well-known/agent-card.json, as the SDK does), makes one call through the SDK's client
(JSON-RPC binding, A2A 1.0) and prints what the SDK gave back as JSON lines (ProtoJSON, as the SDK
renders it). An error the SDK raises is printed as {"error": {"type", "message"}} and exits 2.
The bearer token, if any, is read from the A2A_TOKEN environment variable.

    client.py card URL
    client.py send URL TEXT [--message-id M] [--context-id C] [--task-id T]
                            [--return-immediately] [--stream] [--push-url U --push-token K]
    client.py get URL TASK [--history-length N]
    client.py list URL [--context-id C] [--page-size N] [--page-token T]
    client.py cancel URL TASK
    client.py subscribe URL TASK
"""

import argparse
import asyncio
import json
import os
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import MessageToDict


def out(value) -> None:
    print(json.dumps(MessageToDict(value)), flush=True)


def http() -> httpx.AsyncClient:
    headers = {}
    token = os.environ.get("A2A_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(120.0))


async def run(args: argparse.Namespace) -> None:
    async with http() as h:
        if args.command == "card":
            out(await A2ACardResolver(h, args.url).get_agent_card())
            return
        config = ClientConfig(httpx_client=h, streaming=getattr(args, "stream", False))
        client = await create_client(args.url, client_config=config)
        if args.command == "send":
            message = Message(
                message_id=args.message_id or str(uuid.uuid4()),
                role=Role.ROLE_USER,
                parts=[Part(text=args.text)],
            )
            if args.context_id:
                message.context_id = args.context_id
            if args.task_id:
                message.task_id = args.task_id
            configuration = SendMessageConfiguration(
                return_immediately=args.return_immediately
            )
            if args.push_url:
                configuration.task_push_notification_config.CopyFrom(
                    TaskPushNotificationConfig(url=args.push_url, token=args.push_token or "")
                )
            request = SendMessageRequest(message=message, configuration=configuration)
            async for response in client.send_message(request):
                out(response)
        elif args.command == "get":
            request = GetTaskRequest(id=args.task)
            if args.history_length is not None:
                request.history_length = args.history_length
            out(await client.get_task(request))
        elif args.command == "list":
            request = ListTasksRequest()
            if args.context_id:
                request.context_id = args.context_id
            if args.page_size:
                request.page_size = args.page_size
            if args.page_token:
                request.page_token = args.page_token
            out(await client.list_tasks(request))
        elif args.command == "cancel":
            out(await client.cancel_task(CancelTaskRequest(id=args.task)))
        elif args.command == "subscribe":
            async for response in client.subscribe(SubscribeToTaskRequest(id=args.task)):
                out(response)
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    card = sub.add_parser("card")
    card.add_argument("url")
    send = sub.add_parser("send")
    send.add_argument("url")
    send.add_argument("text")
    send.add_argument("--message-id")
    send.add_argument("--context-id")
    send.add_argument("--task-id")
    send.add_argument("--return-immediately", action="store_true")
    send.add_argument("--stream", action="store_true")
    send.add_argument("--push-url")
    send.add_argument("--push-token")
    get = sub.add_parser("get")
    get.add_argument("url")
    get.add_argument("task")
    get.add_argument("--history-length", type=int)
    listing = sub.add_parser("list")
    listing.add_argument("url")
    listing.add_argument("--context-id")
    listing.add_argument("--page-size", type=int)
    listing.add_argument("--page-token")
    cancel = sub.add_parser("cancel")
    cancel.add_argument("url")
    cancel.add_argument("task")
    subscribe = sub.add_parser("subscribe")
    subscribe.add_argument("url")
    subscribe.add_argument("task")
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as e:  # the SDK's errors, reported for the test to assert on
        print(json.dumps({"error": {"type": type(e).__name__, "message": str(e)}}), flush=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
