"""``@requires_approval``: a human says yes before the decorated function runs."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast

from signoff_client._client import AsyncSignoffClient, SignoffClient
from signoff_client._errors import ApprovalRejected, RequestNotPending, WaitTimeout
from signoff_client._models import Approval

P = ParamSpec("P")
R = TypeVar("R")
MAX_ARGUMENT_CHARS = 2000


class _Request:
    """What the request for one call says: built from the function and its arguments."""

    def __init__(
        self,
        fn: Callable[..., Any],
        title: str | None,
        description: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> None:
        self.fn = fn
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self.signature = inspect.signature(fn)
        self.title = title
        self.description = description
        self.metadata = dict(metadata or {})

    def fields(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = {name: _jsonable(value) for name, value in bound.arguments.items()}
        call = ", ".join(f"{name}={json.dumps(value)}" for name, value in arguments.items())
        named = _Lenient(bound.arguments)
        title = self.title.format_map(named) if self.title else f"Run {self.fn.__name__}"
        if self.description:
            description = self.description.format_map(named)
        else:  # generated: its JSON braces are not placeholders
            doc = inspect.getdoc(self.fn)
            description = "\n\n".join(part for part in (f"{self.name}({call})", doc) if part)
        return {
            "title": title,
            "description": description,
            "metadata": {**self.metadata, "function": self.name, "arguments": arguments},
        }


class _Lenient(dict[str, Any]):
    """``str.format_map`` source that leaves unknown ``{names}`` as they are."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _jsonable(value: Any) -> Any:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:MAX_ARGUMENT_CHARS]
    return value if len(text) <= MAX_ARGUMENT_CHARS else text[:MAX_ARGUMENT_CHARS] + "..."


def requires_approval(
    client: SignoffClient | AsyncSignoffClient,
    *,
    title: str | None = None,
    priority: str = "medium",
    description: str | None = None,
    action_type: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    timeout: float = 3600.0,
    cancel_on_timeout: bool = True,
    source: str | None = "signoff-client",
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Ask for approval each time the decorated function is called, and wait for it.

    The request describes the call: ``title`` and ``description`` may name arguments as
    ``{name}`` placeholders; by default the description shows the function and its
    arguments, and ``metadata`` carries them as JSON. Approved: the function runs and its
    result is returned. Rejected, cancelled or expired: ``ApprovalRejected`` (with
    ``.comment``). No decision within ``timeout`` seconds: the request is cancelled
    (unless ``cancel_on_timeout=False``) and ``WaitTimeout`` is raised.

    A plain function needs a ``SignoffClient``; an ``async def`` one an
    ``AsyncSignoffClient``.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        request = _Request(fn, title, description, metadata)
        options = {"priority": priority, "action_type": action_type, "source": source}
        if inspect.iscoroutinefunction(fn):
            if not isinstance(client, AsyncSignoffClient):
                raise TypeError("an async function needs an AsyncSignoffClient")
            return cast(
                Callable[P, R],
                _async_gate(cast(Any, fn), client, request, options, timeout, cancel_on_timeout),
            )
        if not isinstance(client, SignoffClient):
            raise TypeError("a plain (not async) function needs a SignoffClient")
        return _sync_gate(fn, client, request, options, timeout, cancel_on_timeout)

    return decorate


def _sync_gate(
    fn: Callable[P, R],
    client: SignoffClient,
    request: _Request,
    options: dict[str, Any],
    timeout: float,
    cancel_on_timeout: bool,
) -> Callable[P, R]:
    @functools.wraps(fn)
    def gated(*args: P.args, **kwargs: P.kwargs) -> R:
        created = client.create_approval(
            **request.fields(args, kwargs), **options, idempotency_key=True
        )
        try:
            decided = client.wait_for_decision(created.id, timeout)
        except WaitTimeout:
            if not cancel_on_timeout:
                raise
            try:
                client.cancel(created.id)
            except RequestNotPending:
                # Decided in the last moment: that decision stands.
                decided = client.get_approval(created.id)
            else:
                raise
        _raise_unless_approved(decided)
        return fn(*args, **kwargs)

    return gated


def _async_gate(
    fn: Callable[..., Awaitable[Any]],
    client: AsyncSignoffClient,
    request: _Request,
    options: dict[str, Any],
    timeout: float,
    cancel_on_timeout: bool,
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def gated(*args: Any, **kwargs: Any) -> Any:
        created = await client.create_approval(
            **request.fields(args, kwargs), **options, idempotency_key=True
        )
        try:
            decided = await client.wait_for_decision(created.id, timeout)
        except WaitTimeout:
            if not cancel_on_timeout:
                raise
            try:
                await client.cancel(created.id)
            except RequestNotPending:
                decided = await client.get_approval(created.id)
            else:
                raise
        _raise_unless_approved(decided)
        return await fn(*args, **kwargs)

    return gated


def _raise_unless_approved(decided: Approval) -> None:
    if decided.status != "approved":
        raise ApprovalRejected(decided)
