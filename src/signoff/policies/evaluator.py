"""Evaluating a compiled policy document against a request: the first rule whose
condition is true applies. A condition that fails at run time (a missing key, a type
mismatch) or answers anything but ``true`` does not match: it is logged, never decides.

Compiled documents are cached per (org, version): a version never changes once saved,
so the cache needs no invalidation, only the version in force (read by the create).
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import cel
import orjson

from signoff.policies.document import CompiledDocument, Rule, compile_stored

logger = logging.getLogger(__name__)

CACHE_SIZE = 512


@dataclass(frozen=True)
class RequestFacts:
    """What a condition may read of a request (the ``request`` variable)."""

    action_type: str | None
    source: str | None
    priority: str
    title: str
    metadata: Mapping[str, Any]
    arguments: Mapping[str, Any]
    connection_id: uuid.UUID | None
    connection_name: str | None


def activation(
    facts: RequestFacts, now: datetime, document: CompiledDocument | None = None
) -> dict[str, Any]:
    """The variables a condition sees: ``request`` and ``now`` (UTC); with ``document``,
    only the parts its conditions read."""
    request: dict[str, Any] = {
        "action_type": facts.action_type or "",
        "source": facts.source or "",
        "priority": facts.priority,
        "title": facts.title,
        "metadata": facts.metadata,
        "arguments": facts.arguments,
        "connection": {
            "id": str(facts.connection_id) if facts.connection_id else "",
            "name": facts.connection_name or "",
        },
    }
    now_values = {
        "hour": now.hour,
        "minute": now.minute,
        # ISO: Monday is 1, Sunday 7.
        "weekday": now.isoweekday(),
        "date": now.date().isoformat(),
    }
    if document is None:
        return {"request": request, "now": now_values}
    return {
        "request": _only(request, document.request_fields),
        "now": _only(now_values, document.now_fields),
    }


def _only(values: dict[str, Any], fields: frozenset[str] | None) -> dict[str, Any]:
    if fields is None:
        return values
    return {key: value for key, value in values.items() if key in fields}


def first_match(
    document: CompiledDocument,
    facts: RequestFacts,
    now: datetime,
    memo: dict[bytes, Rule | None] | None = None,
) -> Rule | None:
    """The first rule whose condition is true, or None. A condition that fails at run
    time does not match (logged). The variables are converted to CEL values once (a
    ``cel.Context``), not once per rule: with a plain dict every evaluation converts
    them anew, which costs far more than evaluating.

    ``memo``: answers by the variables the conditions read, for many evaluations of one
    document (a dry run): the answer is a function of them alone, and converting them
    costs more than looking them up."""
    if not document.rules:
        return None
    variables = activation(facts, now, document)
    if memo is None:
        return _first_match(document, variables)
    key = orjson.dumps(variables, option=orjson.OPT_SORT_KEYS, default=str)
    if key not in memo:
        memo[key] = _first_match(document, variables)
    return memo[key]


def _first_match(document: CompiledDocument, variables: dict[str, Any]) -> Rule | None:
    context = cel.Context(variables)
    for rule in document.rules:
        try:
            if rule.program.execute(context) is True:
                return rule
        except Exception as exc:
            logger.info("policy condition %r failed at run time: %s", rule.name, str(exc)[:200])
    return None


class CompiledCache:
    """Compiled documents by (org, version), the least recently used dropped first."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[uuid.UUID, int], CompiledDocument] = OrderedDict()

    def get(
        self, org_id: uuid.UUID, version: int, rules: list[dict[str, Any]] | None = None
    ) -> CompiledDocument | None:
        key = (org_id, version)
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
            return found
        if rules is None:
            return None
        compiled = compile_stored(rules, version)
        self._items[key] = compiled
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return compiled


# One per process: compiled programs are immutable and shared by every request.
compiled_documents = CompiledCache()
