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


def activation(facts: RequestFacts, now: datetime) -> dict[str, Any]:
    """The variables a condition sees: ``request`` and ``now`` (UTC)."""
    return {
        "request": {
            "action_type": facts.action_type or "",
            "source": facts.source or "",
            "priority": facts.priority,
            "title": facts.title,
            "metadata": dict(facts.metadata),
            "arguments": dict(facts.arguments),
            "connection": {
                "id": str(facts.connection_id) if facts.connection_id else "",
                "name": facts.connection_name or "",
            },
        },
        "now": {
            "hour": now.hour,
            "minute": now.minute,
            # ISO: Monday is 1, Sunday 7.
            "weekday": now.isoweekday(),
            "date": now.date().isoformat(),
        },
    }


def first_match(document: CompiledDocument, variables: dict[str, Any]) -> Rule | None:
    """The first rule whose condition is true, or None. The variables are converted to
    CEL values once (a ``cel.Context``), not once per rule: with a plain dict every
    evaluation converts them anew, which costs far more than evaluating."""
    if not document.rules:
        return None
    context = cel.Context(variables)
    for rule in document.rules:
        if matches(rule, context):
            return rule
    return None


def matches(rule: Rule, context: Any) -> bool:
    try:
        result = rule.program.execute(context)
    except Exception as exc:
        logger.info("policy condition %r failed at run time: %s", rule.name, str(exc)[:200])
        return False
    return result is True


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
