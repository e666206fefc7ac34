"""A request's preview: what the approver should look at (a diff, an SQL statement, the
mail to be sent), as ``{"kind": ..., "content": "..."}``.

The content is always text. Two kinds give it a form that is checked at create, so the
page can show it as meant and nothing can be shown two ways:

- ``json``: a JSON text; no duplicate keys (the approver would see one value, a parser
  may take the other), no NaN or Infinity, nested no deeper than metadata may be.
- ``email``: header lines (``Name: value``; a line starting with a space or tab goes on
  the header above), a blank line, then the body. ``From``, ``To`` and ``Subject`` are
  required, once each.

Pure functions: the parsing both the create's validation and the page use, the
preview's hash (bound into receipts), and the plain-text excerpt messages carry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from signoff.common.validation import nesting_depth
from signoff.receipts.arguments import canonical_hash

PreviewKind = Literal["text", "markdown", "diff", "sql", "json", "email"]
PREVIEW_KINDS: tuple[PreviewKind, ...] = ("text", "markdown", "diff", "sql", "json", "email")
KIND_LABELS: dict[str, str] = {
    "text": "Text",
    "markdown": "Markdown",
    "diff": "Diff",
    "sql": "SQL",
    "json": "JSON",
    "email": "E-mail",
}
REQUIRED_MAIL_HEADERS = ("From", "To", "Subject")
# RFC 5322 section 3.6.8: a field name is printable ASCII but the colon.
_HEADER_LINE = re.compile(r"^([!-9;-~]+):[ \t]?(.*)$")


class PreviewError(ValueError):
    """Content that does not have its kind's form; the message says why."""


# ---- the hash ----


def preview_hash(preview: dict[str, Any]) -> str:
    """The hash of the preview object as the API shows it (``kind`` and ``content``)."""
    return canonical_hash({"kind": preview["kind"], "content": preview["content"]})


# ---- json ----


class JsonNumber(str):
    """A number of a JSON preview as it was written: shown exactly, never rounded."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise PreviewError(f"has the key {json.dumps(key)[:80]} twice in one object")
        found[key] = value
    return found


def _refuse_constant(name: str) -> Any:
    raise PreviewError(f"{name} is not JSON")


def parse_json(content: str, max_depth: int) -> Any:
    """The value of a ``json`` preview's content; numbers as their text (``JsonNumber``).

    Raises ``PreviewError`` for anything but one JSON value nested at most ``max_depth``
    levels deep."""
    try:
        value = json.loads(
            content,
            object_pairs_hook=_no_duplicate_keys,
            parse_int=JsonNumber,
            parse_float=JsonNumber,
            parse_constant=_refuse_constant,
        )
    except json.JSONDecodeError as exc:
        raise PreviewError(f"is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise PreviewError(f"is nested deeper than {max_depth} levels") from None
    if nesting_depth(value) > max_depth:
        raise PreviewError(f"is nested deeper than {max_depth} levels")
    return value


def format_json(value: Any, indent: str = "") -> str:
    """A parsed JSON preview (``parse_json``) written again, indented by two spaces, its
    numbers exactly as they were written."""
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        members = [f"{inner}{_string(k)}: {format_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(members) + "\n" + indent + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        items = [inner + format_json(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return scalar_text(value)


def scalar_text(value: Any) -> str:
    """A JSON scalar of a parsed preview as JSON writes it (numbers as written)."""
    if isinstance(value, JsonNumber):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    return json.dumps(value)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


# ---- email ----


@dataclass(frozen=True)
class Mail:
    """An ``email`` preview: its header fields in the order written, and its body."""

    headers: tuple[tuple[str, str], ...]
    body: str

    def header(self, name: str) -> str:
        return next((v for n, v in self.headers if n.lower() == name.lower()), "")


def parse_email(content: str) -> Mail:
    """The header fields and body of an ``email`` preview's content (see the module)."""
    lines = content.replace("\r\n", "\n").split("\n")
    blank = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    headers: list[list[str]] = []
    for number, line in enumerate(lines[:blank], start=1):
        if line[:1] in (" ", "\t"):
            if not headers:
                raise PreviewError("must start with a header line such as 'From: ...'")
            headers[-1][1] += " " + line.strip()
            continue
        match = _HEADER_LINE.match(line)
        if match is None:
            raise PreviewError(
                f"line {number} is not a header ('Name: value'); the body goes after a blank line"
            )
        headers.append([match.group(1), match.group(2).strip()])
    names = [name.lower() for name, _ in headers]
    for required in REQUIRED_MAIL_HEADERS:
        count = names.count(required.lower())
        if count == 0:
            raise PreviewError(f"needs a {required}: header")
        if count > 1:
            raise PreviewError(f"has more than one {required}: header")
    return Mail(tuple((name, value) for name, value in headers), "\n".join(lines[blank + 1 :]))


def check_content(kind: str, content: str, max_depth: int) -> None:
    """Raise ``PreviewError`` when ``content`` has not the form its kind requires."""
    if kind == "json":
        parse_json(content, max_depth)
    elif kind == "email":
        parse_email(content)


# ---- the excerpt messages carry ----

EXCERPT_LINES = 8
EXCERPT_CHARS = 600
EXCERPT_LINE_CHARS = 160
# Deeper than any preview a create accepts: the excerpt re-reads what was stored.
EXCERPT_JSON_DEPTH = 200


def excerpt(
    preview: dict[str, Any] | None,
    lines: int = EXCERPT_LINES,
    chars: int = EXCERPT_CHARS,
) -> str | None:
    """The first lines of a preview as plain text (each line and the whole cut short,
    ``…`` where cut), or None without a preview. Each channel makes it inert for its
    format, as it does the request's other text."""
    if not preview or not isinstance(preview.get("content"), str):
        return None
    text = _excerpt_source(str(preview.get("kind")), preview["content"])
    every = text.replace("\r\n", "\n").split("\n")
    while every and not every[-1].strip():
        every.pop()
    shown = [_cut_line(line) for line in every[:lines]]
    cut = len(every) > lines
    result = "\n".join(shown)
    if len(result) > chars:
        result, cut = result[: chars - 1].rstrip(), True
    return result + ("\n…" if cut else "") if result else None


def _cut_line(line: str) -> str:
    line = line.rstrip().expandtabs(4)
    return line if len(line) <= EXCERPT_LINE_CHARS else line[: EXCERPT_LINE_CHARS - 1] + "…"


def _excerpt_source(kind: str, content: str) -> str:
    if kind == "email":
        try:
            mail = parse_email(content)
        except PreviewError:
            return content
        head = [f"{name}: {mail.header(name)}" for name in REQUIRED_MAIL_HEADERS]
        return "\n".join([*head, "", mail.body.strip("\n")])
    if kind == "json":
        # A JSON text on one line would show as one cut line: shown indented instead.
        try:
            return format_json(parse_json(content, EXCERPT_JSON_DEPTH))
        except PreviewError:
            return content
    return content
