"""``@requires_approval``: a human says yes before the decorated function runs."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast

from signoff_client._client import AsyncSignoffClient, SignoffClient
from signoff_client._errors import (
    ApprovalRejected,
    ArgumentsMismatch,
    InvalidReceipt,
    RequestNotPending,
    WaitTimeout,
)
from signoff_client._models import Approval
from signoff_client._receipts import arguments_hash

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

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound

    def fields(self, bound: inspect.BoundArguments) -> dict[str, Any]:
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


class _Binding:
    """One call's arguments: as sent for approval, and the call that runs once approved."""

    def __init__(self, bound: inspect.BoundArguments, send: bool | None) -> None:
        self.bound = bound
        self.sent = _exact_json(bound.arguments) if send is not False else None
        if send and self.sent is None:
            raise TypeError(
                "send_arguments=True, but JSON cannot carry these arguments exactly "
                f"({', '.join(bound.arguments)})"
            )

    def approved(self, decided: Approval, require_receipt: bool) -> _Run:
        """What may run after ``decided`` was approved, and the receipt to check first."""
        token = decided.receipt
        if token is None:
            if decided.receipt_issued or require_receipt:
                raise InvalidReceipt(f"approval request {decided.id} came without its receipt")
            return _Run(None, {}, self.bound)  # a server without receipts: as before them
        sent = self.sent if self.sent is not None else {}
        if not decided.arguments_edited:
            return _Run(token, sent, self.bound)
        edited = decided.arguments
        if self.sent is None or not isinstance(edited, dict) or set(edited) != set(sent):
            raise ArgumentsMismatch(
                f"approval request {decided.id}: the edited arguments do not fit the call"
            )
        return _Run(token, edited, self._with(edited))

    def _with(self, values: dict[str, Any]) -> inspect.BoundArguments:
        bound = self.bound.signature.bind(*self.bound.args, **self.bound.kwargs)
        for name, value in values.items():
            bound.arguments[name] = _parameter_value(bound.signature.parameters[name], value)
        return bound


def _parameter_value(parameter: inspect.Parameter, value: Any) -> Any:
    """An edited JSON value as the parameter takes it (``*args`` is a tuple)."""
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        if not isinstance(value, list):
            raise ArgumentsMismatch(f"the edited {parameter.name} is not a list")
        return tuple(value)
    if parameter.kind is inspect.Parameter.VAR_KEYWORD and not isinstance(value, dict):
        raise ArgumentsMismatch(f"the edited {parameter.name} is not an object")
    return value


class _Run:
    """The function's call once approved: checked against ``token`` unless there is none."""

    def __init__(
        self, token: str | None, arguments: dict[str, Any], bound: inspect.BoundArguments
    ) -> None:
        self.token = token
        self.arguments = arguments
        self.bound = bound

    def check(self, receipt_request_id: str, approval_id: str) -> None:
        if receipt_request_id != approval_id:
            raise InvalidReceipt(
                f"the receipt is for approval request {receipt_request_id}, not {approval_id}"
            )


def _exact_json(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
    """The arguments as a JSON object, or None when JSON cannot carry them exactly."""
    try:
        value: dict[str, Any] = json.loads(json.dumps(dict(arguments), allow_nan=False))
        arguments_hash(value)  # integers past 2**53 have no canonical form
    except (TypeError, ValueError):
        return None
    return value


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
    arguments_schema: Mapping[str, Any] | None = None,
    send_arguments: bool | None = None,
    require_receipt: bool = False,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Ask for approval each time the decorated function is called, and wait for it.

    The request describes the call: ``title`` and ``description`` may name arguments as
    ``{name}`` placeholders; by default the description shows the function and its
    arguments, and ``metadata`` carries them as JSON. Approved: the function runs and its
    result is returned. Rejected, cancelled or expired: ``ApprovalRejected`` (with
    ``.comment``). No decision within ``timeout`` seconds: the request is cancelled
    (unless ``cancel_on_timeout=False``) and ``WaitTimeout`` is raised.

    The call's arguments are sent as the request's ``arguments`` when JSON carries them
    exactly (``send_arguments=True`` insists, raising ``TypeError`` otherwise; ``False``
    never sends them). Once approved, the receipt is verified against the server's keys
    and redeemed before the function runs, and the function gets only the approved
    arguments: the approver's edits, if the request has an ``arguments_schema`` and they
    edited them. Arguments other than the approved ones raise ``ArgumentsMismatch`` and
    the function does not run; any other receipt problem raises ``InvalidReceipt``. A
    server that issues no receipts (older than them) is trusted as before: the function
    runs with its arguments, unless ``require_receipt=True``.

    A plain function needs a ``SignoffClient``; an ``async def`` one an
    ``AsyncSignoffClient``.
    """

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        gate = _Gate(
            _Request(fn, title, description, metadata),
            {
                "priority": priority,
                "action_type": action_type,
                "source": source,
                "arguments_schema": arguments_schema,
            },
            timeout,
            cancel_on_timeout,
            send_arguments,
            require_receipt,
        )
        if inspect.iscoroutinefunction(fn):
            if not isinstance(client, AsyncSignoffClient):
                raise TypeError("an async function needs an AsyncSignoffClient")
            return cast(Callable[P, R], _async_gate(cast(Any, fn), client, gate))
        if not isinstance(client, SignoffClient):
            raise TypeError("a plain (not async) function needs a SignoffClient")
        return _sync_gate(fn, client, gate)

    return decorate


class _Gate:
    """How a decorated function asks: the same for plain and async functions."""

    def __init__(
        self,
        request: _Request,
        options: dict[str, Any],
        timeout: float,
        cancel_on_timeout: bool,
        send_arguments: bool | None,
        require_receipt: bool,
    ) -> None:
        self.request = request
        self.options = options
        self.timeout = timeout
        self.cancel_on_timeout = cancel_on_timeout
        self.send_arguments = send_arguments
        self.require_receipt = require_receipt

    def binding(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Binding:
        return _Binding(self.request.bind(args, kwargs), self.send_arguments)

    def create_fields(self, binding: _Binding) -> dict[str, Any]:
        return {
            **self.request.fields(binding.bound),
            **self.options,
            "arguments": binding.sent,
            "idempotency_key": True,
        }


def _sync_gate(fn: Callable[P, R], client: SignoffClient, gate: _Gate) -> Callable[P, R]:
    @functools.wraps(fn)
    def gated(*args: P.args, **kwargs: P.kwargs) -> R:
        binding = gate.binding(args, kwargs)
        created = client.create_approval(**gate.create_fields(binding))
        try:
            decided = client.wait_for_decision(created.id, gate.timeout)
        except WaitTimeout:
            if not gate.cancel_on_timeout:
                raise
            try:
                client.cancel(created.id)
            except RequestNotPending:
                # Decided in the last moment: that decision stands.
                decided = client.get_approval(created.id)
            else:
                raise
        _raise_unless_approved(decided)
        run = binding.approved(decided, gate.require_receipt)
        if run.token is not None:
            receipt = client.verify_receipt(
                run.token, arguments=run.arguments, action_type=gate.options["action_type"]
            )
            run.check(receipt.request_id, decided.id)
            client.redeem_receipt(run.token, arguments=run.arguments)
        return fn(*run.bound.args, **run.bound.kwargs)

    return gated


def _async_gate(
    fn: Callable[..., Awaitable[Any]], client: AsyncSignoffClient, gate: _Gate
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def gated(*args: Any, **kwargs: Any) -> Any:
        binding = gate.binding(args, kwargs)
        created = await client.create_approval(**gate.create_fields(binding))
        try:
            decided = await client.wait_for_decision(created.id, gate.timeout)
        except WaitTimeout:
            if not gate.cancel_on_timeout:
                raise
            try:
                await client.cancel(created.id)
            except RequestNotPending:
                decided = await client.get_approval(created.id)
            else:
                raise
        _raise_unless_approved(decided)
        run = binding.approved(decided, gate.require_receipt)
        if run.token is not None:
            receipt = await client.verify_receipt(
                run.token, arguments=run.arguments, action_type=gate.options["action_type"]
            )
            run.check(receipt.request_id, decided.id)
            await client.redeem_receipt(run.token, arguments=run.arguments)
        return await fn(*run.bound.args, **run.bound.kwargs)

    return gated


def _raise_unless_approved(decided: Approval) -> None:
    if decided.status != "approved":
        raise ApprovalRejected(decided)
