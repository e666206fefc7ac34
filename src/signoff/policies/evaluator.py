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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import orjson

from signoff.policies.document import CompiledDocument, Rule, compile_stored

logger = logging.getLogger(__name__)

CACHE_SIZE = 512
_T = TypeVar("_T")


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


# How each field a condition may read is made from a request and the time; a dry run
# builds only the fields its document reads, once per past request.
_REQUEST_VALUES: dict[str, Callable[[RequestFacts], Any]] = {
    "action_type": lambda facts: facts.action_type or "",
    "source": lambda facts: facts.source or "",
    "priority": lambda facts: facts.priority,
    "title": lambda facts: facts.title,
    "metadata": lambda facts: facts.metadata,
    "arguments": lambda facts: facts.arguments,
    "connection": lambda facts: {
        "id": str(facts.connection_id) if facts.connection_id else "",
        "name": facts.connection_name or "",
    },
}
_NOW_VALUES: dict[str, Callable[[datetime], Any]] = {
    "hour": lambda now: now.hour,
    "minute": lambda now: now.minute,
    # ISO: Monday is 1, Sunday 7.
    "weekday": lambda now: now.isoweekday(),
    "date": lambda now: now.date().isoformat(),
}


def activation(
    facts: RequestFacts, now: datetime, document: CompiledDocument | None = None
) -> dict[str, Any]:
    """The variables a condition sees: ``request`` and ``now`` (UTC); with ``document``,
    only the parts its conditions read."""
    request_fields = document.request_fields if document is not None else None
    now_fields = document.now_fields if document is not None else None
    return {
        "request": _values(_REQUEST_VALUES, request_fields, facts),
        "now": _values(_NOW_VALUES, now_fields, now),
    }


def _values(
    makers: Mapping[str, Callable[[_T], Any]], fields: frozenset[str] | None, source: _T
) -> dict[str, Any]:
    if fields is None:
        return {name: make(source) for name, make in makers.items()}
    return {name: make(source) for name, make in makers.items() if name in fields}


def first_match(
    document: CompiledDocument,
    facts: RequestFacts,
    now: datetime,
    memo: dict[bytes, Rule | None] | None = None,
) -> Rule | None:
    """The first rule whose condition is true, or None. A condition that fails at run
    time does not match (logged once per distinct input). The variables are converted to
    CEL values once (a ``cel.Context``), not once per rule: with a plain dict every
    evaluation converts them anew, which costs far more than evaluating.

    Answers are looked up by the variables the conditions read: in ``memo`` (a dry run's,
    for one replay), else in the document's own bounded ``answers``. The answer is a
    function of those variables alone (``fields_read`` bounds them from above)."""
    if not document.rules:
        return None
    variables = activation(facts, now, document)
    key = orjson.dumps(variables, option=orjson.OPT_SORT_KEYS, default=str)
    if memo is not None:
        if key not in memo:
            memo[key] = _first_match(document, variables)
        return memo[key]
    answers = document.answers
    if key in answers:
        answers.move_to_end(key)
        return answers[key]
    answer = _first_match(document, variables)
    answers.keep(key, answer)
    return answer


def _first_match(document: CompiledDocument, variables: dict[str, Any]) -> Rule | None:
    import cel  # loaded already: the document's rules were compiled with it

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
