"""``SIGNOFF_COMPAT_LEGACY_CLIENTS``: single-object answers also carry the object under
``data``, the envelope older SDKs unwrap. Installed only while the setting is on
(app.py), so with it off not one byte of an answer changes.

An answer is a single object when it is a successful JSON object of ``/api/v1`` with no
``data`` key of its own (lists have one). The interface's description, its docs page
and the OAuth token exchange keep their own shapes.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.middleware import API_PREFIX, PUBLIC_API_PATHS


def with_data_envelope(body: bytes) -> bytes | None:
    """The answer with its object repeated under ``data``; None when it is not one."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or "data" in parsed:
        return None
    return orjson.dumps({**parsed, "data": parsed})


def _is_single_object_candidate(scope: Scope) -> bool:
    path: str = scope.get("path", "")
    return (
        scope["type"] == "http"
        and path.startswith(API_PREFIX + "/")
        and path not in PUBLIC_API_PATHS
    )


class LegacyDataEnvelope:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_single_object_candidate(scope):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewrite(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                if _is_json_success(message):
                    start = message  # held until the whole body is here
                    return
                await send(message)
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            await _send_whole(send, start, with_data_envelope(body) or body)

        await self.app(scope, receive, rewrite)


def _is_json_success(start: Message) -> bool:
    if not 200 <= start["status"] < 300:
        return False
    for name, value in start.get("headers", []):
        if name.lower() == b"content-type":
            return bool(value.split(b";")[0].strip() == b"application/json")
    return False


async def _send_whole(send: Send, start: Message, body: bytes) -> None:
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body})
