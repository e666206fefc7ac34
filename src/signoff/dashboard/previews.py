"""A request's preview as HTML for its page, by kind (approvals/previews.py says what
each kind's content is).

Everything in a preview comes from the caller that created the request, so every
character of it is escaped or passes through a renderer that escapes: markdown-it-py
with raw HTML off, Pygments' HTML formatter. Nothing here runs scripts or loads
anything: links go only to http, https and mailto addresses, and images are shown as
links, never fetched. Pure functions answering ``Markup``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import SqlLexer

from signoff.approvals.previews import (
    JsonNumber,
    PreviewError,
    format_json,
    parse_email,
    parse_json,
    scalar_text,
)

# Deeper than any preview a create accepts (the setting's ceiling): the page reads what
# was stored, whatever the limit is today.
STORED_JSON_DEPTH = 200
# A JSON tree of more nodes is shown as indented text: a page of a hundred thousand
# nested lists helps nobody.
MAX_TREE_NODES = 5000
# Objects and arrays this shallow start open; deeper ones too when the tree is small.
OPEN_LEVELS = 2
SMALL_TREE_NODES = 200
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
# Past these, a preview is shown as written, unformatted: markdown and SQL are formatted
# in pure Python at some microseconds a character (hostile markdown at far more), and a
# diff's every line becomes a table row. Nobody reviews more line by line.
MAX_FORMATTED_CHARS = 64 * 1024
MAX_DIFF_LINES = 5000
# Pages of the same request render its preview once per process: a preview never changes.
CACHED_PREVIEWS = 32


def render_preview(preview: dict[str, Any] | None) -> Markup:
    """The preview's body for the request page ('' without one). CPU-bound on a large
    preview: the page renders it in a worker thread (``endpoints.request_page``)."""
    if not preview or not isinstance(preview.get("content"), str):
        return Markup("")
    return _render(str(preview.get("kind")), preview["content"])


@lru_cache(maxsize=CACHED_PREVIEWS)
def _render(kind: str, content: str) -> Markup:
    render = _RENDERERS.get(kind, render_text)
    if kind == "diff":
        too_long = content.count("\n") >= MAX_DIFF_LINES
    else:
        too_long = kind in ("markdown", "sql") and len(content) > MAX_FORMATTED_CHARS
    if too_long:
        note = Markup('<p class="help">Too long to format: shown as written.</p>')
        return note + render_text(content)
    try:
        return render(content)
    except PreviewError:
        # Stored before a rule it breaks existed: shown as it was written.
        return render_text(content)


def _box(tag: str, classes: str, inner: Markup | str) -> Markup:
    """The box a preview is shown in, which scrolls what is too wide or too long for it:
    focusable, so a keyboard scrolls it too."""
    return Markup(
        '<{0} tabindex="0" role="region" aria-label="Preview content" class="preview-box {1}">'
        "{2}</{0}>"
    ).format(tag, classes, inner)


# ---- text ----


def render_text(content: str) -> Markup:
    return _box("pre", "preview-text", content)


# ---- diff ----

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FILE_LINES = (
    *("diff ", "--- ", "+++ ", "index ", "new file", "deleted file", "similarity "),
    *("rename ", "old mode", "new mode", "Binary files", "copy "),
)
MINUS = "\u2212"  # a removed line's sign: as wide as the plus
_SIGNS = {"add": ("+", "Added"), "del": (MINUS, "Removed"), "ctx": ("", "")}


def render_diff(content: str) -> Markup:
    """A unified diff as a table: old and new line numbers, then the line; added and
    removed lines are coloured, signed (plus, minus) and named for screen readers."""
    rows: list[Markup] = []
    added = removed = 0
    old = new = 0
    old_left = new_left = 0
    for line in content.splitlines():
        if old_left > 0 or new_left > 0:
            if line.startswith("+"):
                rows.append(_diff_row("add", "", new, line[1:]))
                new, new_left, added = new + 1, new_left - 1, added + 1
            elif line.startswith("-"):
                rows.append(_diff_row("del", old, "", line[1:]))
                old, old_left, removed = old + 1, old_left - 1, removed + 1
            elif line.startswith("\\"):
                rows.append(_diff_note(line))
            else:
                rows.append(_diff_row("ctx", old, new, line[1:]))
                old, new, old_left, new_left = old + 1, new + 1, old_left - 1, new_left - 1
            continue
        hunk = _HUNK.match(line)
        if hunk:
            old, new = int(hunk.group(1)), int(hunk.group(3))
            old_left = int(hunk.group(2) or 1)
            new_left = int(hunk.group(4) or 1)
            rows.append(Markup('<tr class="diff-hunk"><td colspan="3">{}</td></tr>').format(line))
        elif line.startswith(_FILE_LINES):
            rows.append(Markup('<tr class="diff-file"><td colspan="3">{}</td></tr>').format(line))
        elif line.startswith("+"):  # a diff without hunk headers: signs alone
            rows.append(_diff_row("add", "", "", line[1:]))
            added += 1
        elif line.startswith("-"):
            rows.append(_diff_row("del", "", "", line[1:]))
            removed += 1
        elif line.startswith("\\"):
            rows.append(_diff_note(line))
        else:
            rows.append(_diff_row("ctx", "", "", line[1:] if line.startswith(" ") else line))
    summary = Markup(
        '<p class="diff-summary"><span class="diff-count diff-count-add">+{} added</span> '
        '<span class="diff-count diff-count-del">{}{} removed</span></p>'
    ).format(added, MINUS, removed)
    table = Markup(
        '<table class="diff"><caption class="visually-hidden">Lines added: {}, removed: {}'
        '</caption><thead class="visually-hidden"><tr><th scope="col">Old line</th>'
        '<th scope="col">New line</th><th scope="col">Line</th></tr></thead>'
        "<tbody>{}</tbody></table>"
    ).format(added, removed, Markup("").join(rows))
    return summary + _box("div", "preview-scroll", table)


def _diff_row(kind: str, old: int | str, new: int | str, text: str) -> Markup:
    sign, spoken = _SIGNS[kind]
    marker = (
        Markup('<span class="visually-hidden">{}: </span><span class="diff-sign" '
               'aria-hidden="true">{}</span>').format(spoken, sign)
        if sign
        else Markup('<span class="diff-sign" aria-hidden="true"> </span>')
    )  # fmt: skip
    return Markup(
        '<tr class="diff-{}"><td class="diff-num">{}</td><td class="diff-num">{}</td>'
        '<td class="diff-code">{}{}</td></tr>'
    ).format(kind, old, new, marker, text)


def _diff_note(line: str) -> Markup:
    return Markup('<tr class="diff-note"><td colspan="3">{}</td></tr>').format(line)


# ---- sql ----


@lru_cache(maxsize=1)
def _sql_tools() -> tuple[SqlLexer, HtmlFormatter[str]]:
    # Classes, not inline styles: app.css colours them (and the page allows no inline
    # style). ``nowrap``: the spans alone, inside our own box.
    return SqlLexer(), HtmlFormatter(nowrap=True, classprefix="tok-")


def render_sql(content: str) -> Markup:
    lexer, formatter = _sql_tools()
    spans = highlight(content, lexer, formatter)  # Pygments escapes the text it wraps
    code = Markup("<code>{}</code>").format(Markup(spans))  # noqa: S704 - Pygments' HTML
    return _box("pre", "preview-code preview-sql", code)


# ---- markdown ----


def _allowed_link(url: str) -> bool:
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return False
    return scheme in LINK_SCHEMES


def _link_open(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    tokens[idx].attrSet("rel", "noopener nofollow")
    return renderer.renderToken(tokens, idx, options, env)


def _image(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    """An image as a link to it, never loaded: a preview must not call out from the
    approver's browser."""
    token = tokens[idx]
    alt = renderer.renderInlineAsText(token.children or [], options, env) or "image"
    src = str(token.attrGet("src") or "")
    return str(
        Markup('<a href="{}" rel="noopener nofollow" class="preview-image-link">Image: {}</a>')
        .format(src, alt)
    )  # fmt: skip


def _heading(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # Below the page's own headings (h1 the request, h2 its sections).
    token = tokens[idx]
    token.tag = f"h{min(int(token.tag[1:]) + 2, 6)}"
    return renderer.renderToken(tokens, idx, options, env)


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _allowed_link  # type: ignore[method-assign]
    md.add_render_rule("link_open", _link_open)
    md.add_render_rule("image", _image)
    md.add_render_rule("heading_open", _heading)
    md.add_render_rule("heading_close", _heading)
    return md


def render_markdown(content: str) -> Markup:
    # Raw HTML is off: markdown-it escapes it as text, as it does every other character.
    html = Markup(_markdown().render(content))  # noqa: S704 - markdown-it's HTML
    return _box("div", "preview-markdown", html)


# ---- email ----


def render_email(content: str) -> Markup:
    mail = parse_email(content)
    headers = Markup("").join(
        Markup("<div><dt>{}</dt><dd>{}</dd></div>").format(name, value)
        for name, value in mail.headers
    )
    shown = Markup('<dl class="email-headers">{}</dl><pre class="email-body">{}</pre>')
    return _box("div", "preview-email", shown.format(headers, mail.body))


# ---- json ----


def render_json(content: str) -> Markup:
    value = parse_json(content, STORED_JSON_DEPTH)
    nodes = _count_nodes(value)
    if nodes > MAX_TREE_NODES:
        note = Markup('<p class="help">{} values: shown as text.</p>').format(f"{nodes:,}")
        return note + _box("pre", "preview-code", format_json(value))
    tree = Markup('<ul class="json-tree">{}</ul>').format(_json_item(None, value, 0, nodes))
    return _box("div", "preview-scroll", tree)


def _count_nodes(value: Any) -> int:
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _json_item(key: str | int | None, value: Any, depth: int, nodes: int) -> Markup:
    label = _json_key(key)
    if isinstance(value, dict | list):
        children: list[tuple[str | int, Any]] = (
            list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        )
        brackets = "{}" if isinstance(value, dict) else "[]"
        count = f"{len(children)} {'key' if isinstance(value, dict) else 'item'}"
        count += "" if len(children) == 1 else "s"
        if not children:
            return Markup('<li>{}<span class="json-punct">{}</span></li>').format(label, brackets)
        shown = nodes <= SMALL_TREE_NODES or depth < OPEN_LEVELS
        opened = Markup(" open") if shown else Markup("")
        inner = Markup("").join(_json_item(k, v, depth + 1, nodes) for k, v in children)
        return Markup(
            '<li><details{}><summary>{}<span class="json-punct">{}</span> '
            '<span class="json-count">{}</span></summary><ul>{}</ul></details></li>'
        ).format(opened, label, brackets, count, inner)
    return Markup('<li>{}<span class="json-{}">{}</span></li>').format(
        label, _json_type(value), scalar_text(value)
    )


def _json_key(key: str | int | None) -> Markup:
    if key is None:
        return Markup("")
    if isinstance(key, int):
        return Markup(
            '<span class="json-index">{}</span><span class="json-punct">: </span>'
        ).format(key)
    return Markup('<span class="json-key">{}</span><span class="json-punct">: </span>').format(
        scalar_text(key)
    )


def _json_type(value: Any) -> str:
    if isinstance(value, JsonNumber):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "null"


_RENDERERS: dict[str, Callable[[str], Markup]] = {
    "text": render_text,
    "diff": render_diff,
    "sql": render_sql,
    "markdown": render_markdown,
    "email": render_email,
    "json": render_json,
}
