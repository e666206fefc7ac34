"""The policy document: its shape, its limits, and the compiled form the create path
evaluates (CEL through ``common-expression-language``, docs/decisions/0026-cel-package.md).

A document is ``{"rules": [rule, ...]}``; the first rule whose ``condition`` is true
applies. Everything is checked before anything is stored: a wrong document answers 400
naming every wrong field (``rules.2.condition`` with the position the compiler gives).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from signoff.errors import ValidationFailed

Effect = Literal["auto_approve", "auto_reject", "require", "escalate"]
EFFECTS: tuple[Effect, ...] = ("auto_approve", "auto_reject", "require", "escalate")
PASSKEY_EFFECTS = ("require", "escalate")
PRIORITIES = ("low", "medium", "high", "critical")
BUDGET_WINDOWS = {"hour": 3600, "day": 86400}
BUDGET_SCOPES = ("org", "connection", "action_type")

MAX_RULES = 1000
MAX_NAME = 100
MAX_REASON = 1000
# A condition's size and nesting are capped before the compiler sees it: its cost is
# then bounded, since comprehension macros (whose iteration variables are not one of the
# two known ones) are refused, leaving no loop in the language.
MAX_CONDITION = 2000
MAX_NESTING = 32
MAX_BUDGET_COUNT = 1_000_000
MAX_BUDGET_SUM = 1e12
MAX_EXPIRES_IN = 365 * 86400
MAX_RULE_GROUPS = 10
MAX_GROUP_NAME = 100
GROUP_ORDERS = ("parallel", "sequential")
MAX_REQUIRED_APPROVALS = 20
VARIABLES = frozenset({"request", "now"})
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:-]*$")
_ARGUMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


@dataclass(frozen=True)
class Budget:
    per: str  # "hour" or "day"
    scope: str  # "org", "connection" or "action_type"
    max_count: int | None
    max_sum: float | None
    sum_of: str | None  # the numeric argument summed

    @property
    def window_seconds(self) -> int:
        return BUDGET_WINDOWS[self.per]


@dataclass(frozen=True)
class Rule:
    name: str
    condition: str
    effect: Effect
    program: Any  # cel.Program
    reason: str | None = None
    required_approvals: int | None = None
    priority: str | None = None
    expires_in_seconds: int | None = None
    budget: Budget | None = None
    # The requests it matches are decided only with the approver's passkey.
    passkey: bool = False
    # ``require`` naming groups: a chain step per group, (group name, count), in parallel
    # or in order (``group_order``).
    groups: tuple[tuple[str, int], ...] = ()
    group_order: str | None = None


class AnswerMemo(OrderedDict[bytes, "Rule | None"]):
    """A document's answers by the variables its conditions read (as JSON bytes), the
    least recently used dropped past ``size``: the answer is a function of those
    variables alone, and requests of one kind repeat them (the same action type, source
    and connection), so a create under many rules looks its answer up instead of
    evaluating every rule again."""

    # Keys longer than this (conditions reading large arguments) are not kept: memory
    # stays bounded at ``size`` short keys.
    MAX_KEY_BYTES = 512

    def __init__(self, size: int = 4096) -> None:
        super().__init__()
        self.size = size

    def keep(self, key: bytes, answer: Rule | None) -> None:
        if len(key) > self.MAX_KEY_BYTES:
            return
        self[key] = answer
        if len(self) > self.size:
            self.popitem(last=False)


@dataclass(frozen=True)
class CompiledDocument:
    version: int
    rules: tuple[Rule, ...]
    # The fields of ``request`` the conditions name (None: possibly any), and whether any
    # reads ``now``: only those are converted to CEL values for an evaluation, which
    # costs more than evaluating (a dry run converts one request per past request).
    request_fields: frozenset[str] | None = None
    now_fields: frozenset[str] | None = None
    # Shared by every create under this version in the process (compiled documents are
    # cached per process): see ``AnswerMemo``.
    answers: AnswerMemo = field(default_factory=AnswerMemo, compare=False, repr=False)


def fields_read(conditions: list[str], variable: str) -> frozenset[str] | None:
    """The ``<variable>.<field>`` names the conditions spell out, read off their text (a
    bound, not a parse; a string literal naming one only adds a field): None when the
    variable appears otherwise too (``request["x"]``, ``now`` alone), so every field is
    then given."""
    field_read = re.compile(rf"\b{variable}\s*\.\s*([A-Za-z_]\w*)")
    named = re.compile(rf"\b{variable}\b")
    fields: set[str] = set()
    for text in conditions:
        found = field_read.findall(text)
        if len(found) != len(named.findall(text)):
            return None
        fields.update(found)
    return frozenset(fields)


def compile_document(data: Any, version: int = 0) -> tuple[list[dict[str, Any]], CompiledDocument]:
    """The document's rules as stored (normalized), and compiled; or raise 400 naming
    every wrong field."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise ValidationFailed.for_field("rules", "must be a list of rules")
    items = data["rules"]
    if len(items) > MAX_RULES:
        raise ValidationFailed.for_field("rules", f"at most {MAX_RULES} rules")
    errors: list[dict[str, str]] = []
    stored: list[dict[str, Any]] = []
    compiled: list[Rule] = []
    names: set[str] = set()
    for index, item in enumerate(items):
        where = f"rules.{index}"
        rule = _rule(item, where, errors)
        if rule is None:
            continue
        if rule.name in names:
            errors.append(_error(f"{where}.name", f"the name {rule.name!r} is used twice"))
            continue
        names.add(rule.name)
        compiled.append(rule)
        stored.append(stored_rule(rule))
    if errors:
        raise ValidationFailed.for_fields(errors)
    conditions = [rule.condition for rule in compiled]
    document = CompiledDocument(
        version,
        tuple(compiled),
        fields_read(conditions, "request"),
        fields_read(conditions, "now"),
    )
    return stored, document


def compile_stored(rules: list[dict[str, Any]], version: int) -> CompiledDocument:
    """A stored version, compiled (it was checked when saved)."""
    return compile_document({"rules": rules}, version)[1]


def stored_rule(rule: Rule) -> dict[str, Any]:
    out: dict[str, Any] = {"name": rule.name, "condition": rule.condition, "effect": rule.effect}
    optional = {
        "reason": rule.reason,
        "required_approvals": rule.required_approvals,
        "priority": rule.priority,
        "expires_in_seconds": rule.expires_in_seconds,
    }
    out.update({key: value for key, value in optional.items() if value is not None})
    if rule.passkey:
        out["passkey"] = True
    if rule.groups:
        out["groups"] = [{"group": name, "count": count} for name, count in rule.groups]
        out["order"] = rule.group_order
    if rule.budget is not None:
        budget = rule.budget
        out["budget"] = {
            key: value
            for key, value in {
                "per": budget.per,
                "scope": budget.scope,
                "max_count": budget.max_count,
                "max_sum": budget.max_sum,
                "sum_of": budget.sum_of,
            }.items()
            if value is not None
        }
    return out


def _error(field: str, message: str) -> dict[str, str]:
    return {"field": field, "message": message}


def _rule(item: Any, where: str, errors: list[dict[str, str]]) -> Rule | None:
    if not isinstance(item, dict):
        errors.append(_error(where, "must be an object"))
        return None
    before = len(errors)
    name = item.get("name")
    if not isinstance(name, str) or not (0 < len(name) <= MAX_NAME) or not _NAME.match(name):
        errors.append(
            _error(f"{where}.name", f"1 to {MAX_NAME} letters, digits, spaces or _ . : -")
        )
    effect = item.get("effect")
    if effect not in EFFECTS:
        errors.append(_error(f"{where}.effect", f"one of {', '.join(EFFECTS)}"))
    program = _condition(item.get("condition"), f"{where}.condition", errors)
    extras = _effect_fields(item, effect, where, errors)
    if item.get("passkey") is not None:
        extras |= _passkey_option(item["passkey"], effect, f"{where}.passkey", errors)
    budget = _budget(item.get("budget"), effect, f"{where}.budget", errors)
    if len(errors) > before:
        return None
    return Rule(
        name=str(name),
        condition=item["condition"],
        effect=cast(Effect, effect),
        program=program,
        budget=budget,
        **extras,
    )


def _condition(text: Any, field: str, errors: list[dict[str, str]]) -> Any:
    """The compiled condition, or None having named what is wrong with it."""
    if not isinstance(text, str) or not text.strip():
        errors.append(_error(field, "a CEL expression is required"))
        return None
    if len(text) > MAX_CONDITION:
        errors.append(_error(field, f"at most {MAX_CONDITION} characters"))
        return None
    if _nesting(text) > MAX_NESTING:
        errors.append(_error(field, f"nested deeper than {MAX_NESTING} levels"))
        return None
    # Imported on the first condition compiled: ``cel`` brings its command line (and a
    # terminal toolkit) with it, which a server without policies has no use for
    # (docs/decisions/0043-serve-memory.md).
    import cel

    try:
        program = cel.compile(text)
    except (ValueError, RuntimeError) as exc:
        errors.append(_error(field, _compile_message(exc)))
        return None
    unknown = sorted(set(program.variables()) - VARIABLES)
    if unknown:
        errors.append(
            _error(
                field,
                f"unknown variable {', '.join(unknown)}: only request and now exist "
                "(comprehension macros such as all() and exists() are not allowed)",
            )
        )
        return None
    return program


def _nesting(text: str) -> int:
    """How deep brackets nest, counted over the raw text (a bound, not a parse: brackets
    inside string literals count too, which only errs on the safe side)."""
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def _compile_message(exc: Exception) -> str:
    """The compiler's complaint, with its ``line:column`` position, on one line."""
    message = str(exc)
    found = re.search(r"<input>:(\d+):(\d+): (.*)", message)
    if found:
        line, column, what = found.groups()
        return f"does not compile at line {line}, column {column}: {what.strip()[:300]}"
    return f"does not compile: {message.splitlines()[0][:300]}"


def _effect_fields(
    item: dict[str, Any], effect: Any, where: str, errors: list[dict[str, str]]
) -> dict[str, Any]:
    extras: dict[str, Any] = {}
    if effect == "auto_reject":
        reason = item.get("reason")
        if not isinstance(reason, str) or not (0 < len(reason.strip()) <= MAX_REASON):
            errors.append(_error(f"{where}.reason", f"a reason of 1 to {MAX_REASON} characters"))
        else:
            extras["reason"] = reason.strip()
    elif effect == "require":
        extras |= _require_fields(item, where, errors)
    elif effect == "escalate":
        priority, expires = item.get("priority"), item.get("expires_in_seconds")
        if priority is None and expires is None:
            errors.append(_error(where, "escalate sets priority, expires_in_seconds, or both"))
        if priority is not None and priority not in PRIORITIES:
            errors.append(_error(f"{where}.priority", f"one of {', '.join(PRIORITIES)}"))
        elif priority is not None:
            extras["priority"] = priority
        if expires is not None and not _int_between(expires, 60, MAX_EXPIRES_IN):
            errors.append(
                _error(f"{where}.expires_in_seconds", f"an integer 60 to {MAX_EXPIRES_IN}")
            )
        elif expires is not None:
            extras["expires_in_seconds"] = expires
    return extras


def _require_fields(
    item: dict[str, Any], where: str, errors: list[dict[str, str]]
) -> dict[str, Any]:
    """``require``: a count of approvals, or ``groups`` (a chain of group steps)."""
    if "groups" in item:
        return _group_steps(item, where, errors)
    count = item.get("required_approvals")
    if not _int_between(count, 1, MAX_REQUIRED_APPROVALS):
        errors.append(
            _error(f"{where}.required_approvals", f"an integer 1 to {MAX_REQUIRED_APPROVALS}")
        )
        return {}
    return {"required_approvals": count}


def _group_steps(item: dict[str, Any], where: str, errors: list[dict[str, str]]) -> dict[str, Any]:
    """``require`` with ``groups``: ``[{"group": name, "count": n}, ...]`` and ``order``
    (``parallel``, the default, or ``sequential``). Whether each group exists is checked
    when the document is saved (``policies.service``)."""
    groups, order = item.get("groups"), item.get("order", "parallel")
    if not isinstance(groups, list) or not 1 <= len(groups) <= MAX_RULE_GROUPS:
        errors.append(_error(f"{where}.groups", f"a list of 1 to {MAX_RULE_GROUPS} groups"))
        return {}
    if order not in GROUP_ORDERS:
        errors.append(_error(f"{where}.order", f"one of {', '.join(GROUP_ORDERS)}"))
    named: list[tuple[str, int]] = []
    for index, entry in enumerate(groups):
        field = f"{where}.groups.{index}"
        name = entry.get("group") if isinstance(entry, dict) else None
        count = entry.get("count", 1) if isinstance(entry, dict) else None
        if not isinstance(name, str) or not 0 < len(name.strip()) <= MAX_GROUP_NAME:
            errors.append(_error(f"{field}.group", "the name of a group of the organization"))
        elif not _int_between(count, 1, MAX_REQUIRED_APPROVALS):
            errors.append(_error(f"{field}.count", f"an integer 1 to {MAX_REQUIRED_APPROVALS}"))
        elif name.strip().lower() in {n.lower() for n, _ in named}:
            errors.append(_error(f"{field}.group", "each group may be named once"))
        else:
            named.append((name.strip(), cast(int, count)))
    if "required_approvals" in item:
        errors.append(_error(f"{where}.required_approvals", "give groups or this, not both"))
    return {"groups": tuple(named), "group_order": order}


def _passkey_option(
    value: Any, effect: Any, field: str, errors: list[dict[str, str]]
) -> dict[str, Any]:
    """``passkey: true`` on a rule that leaves the decision to people (require,
    escalate): they must sign it with their passkey."""
    if effect not in PASSKEY_EFFECTS:
        errors.append(_error(field, "only a require or escalate rule asks for a passkey"))
    elif not isinstance(value, bool):
        errors.append(_error(field, "true or false"))
    elif value:
        return {"passkey": True}
    return {}


def _int_between(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _budget(data: Any, effect: Any, field: str, errors: list[dict[str, str]]) -> Budget | None:
    if data is None:
        return None
    if effect != "auto_approve":
        errors.append(_error(field, "only an auto_approve rule has a budget"))
        return None
    if not isinstance(data, dict):
        errors.append(_error(field, "must be an object"))
        return None
    before = len(errors)
    per, scope = data.get("per"), data.get("scope", "org")
    if per not in BUDGET_WINDOWS:
        errors.append(_error(f"{field}.per", "hour or day"))
    if scope not in BUDGET_SCOPES:
        errors.append(_error(f"{field}.scope", f"one of {', '.join(BUDGET_SCOPES)}"))
    max_count, max_sum, sum_of = data.get("max_count"), data.get("max_sum"), data.get("sum_of")
    if max_count is None and max_sum is None:
        errors.append(_error(field, "max_count, max_sum, or both"))
    if max_count is not None and not _int_between(max_count, 1, MAX_BUDGET_COUNT):
        errors.append(_error(f"{field}.max_count", f"an integer 1 to {MAX_BUDGET_COUNT:,}"))
    if max_sum is not None:
        if not _positive_number(max_sum):
            errors.append(
                _error(f"{field}.max_sum", f"a number above 0, at most {MAX_BUDGET_SUM:g}")
            )
        if not isinstance(sum_of, str) or not _ARGUMENT.match(sum_of):
            errors.append(_error(f"{field}.sum_of", "the name of a numeric argument"))
    elif sum_of is not None:
        errors.append(_error(f"{field}.sum_of", "only with max_sum"))
    if len(errors) > before:
        return None
    return Budget(
        per=str(per),
        scope=scope,
        max_count=max_count,
        max_sum=float(max_sum) if max_sum is not None else None,
        sum_of=sum_of,
    )


def _positive_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and 0 < value <= MAX_BUDGET_SUM
