"""A request's preview: accepted by kind, checked, stored with its hash, answered by every
read, and shown on the request page with everything in it escaped; on SQLite and
PostgreSQL."""

from __future__ import annotations

import base64
import hashlib
import json
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.approvals.preview_samples import HOSTILE, SAMPLES
from tests.conftest import Org, approval_body, assert_error, create_approval
from tests.dashboard.support import signed_in

KIB = 1024
# Every tag a preview's HTML may hold (dashboard/previews.py and markdown-it's output).
SAFE_TAGS = {
    *("section", "div", "h2", "h3", "h4", "h5", "h6", "span", "p", "pre", "code", "a"),
    *("table", "caption", "thead", "tbody", "tr", "th", "td", "ul", "ol", "li"),
    *("details", "summary", "dl", "dt", "dd", "em", "strong", "s", "blockquote", "hr", "br"),
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, attrs))


def tags_of(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """The start tags of ``html`` and their attributes, as a browser's parser reads them."""
    parser = _Tags()
    parser.feed("<section " + html)
    return parser.found


def expected_hash(preview: dict[str, Any]) -> str:
    """The hash rule, from the JSON alone: RFC 8785 writes these objects (string members
    only) as sorted keys, no whitespace, UTF-8; then SHA-256, base64url, no padding."""
    canonical = json.dumps(preview, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).digest()
    return "sha-256:" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


async def create(client: httpx.AsyncClient, org: Org, preview: Any) -> httpx.Response:
    return await client.post(
        "/api/v1/approvals", json=approval_body(preview=preview), headers=org.member.headers
    )


def refused_field(response: httpx.Response) -> list[str]:
    details = assert_error(response, 400, "VALIDATION_ERROR")
    return [field["field"] for field in details["fields"]]


@pytest.mark.parametrize("kind", list(SAMPLES))
async def test_each_kind_is_stored_and_read_back_with_its_hash(
    client: httpx.AsyncClient, org: Org, kind: str
) -> None:
    preview = {"kind": kind, "content": SAMPLES[kind]}
    created = await create_approval(client, org.member, preview=preview)
    assert created["preview"] == preview
    assert created["preview_hash"] == expected_hash(preview)
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    assert read.json()["preview"] == preview
    assert read.json()["preview_hash"] == created["preview_hash"]
    listed = await client.get("/api/v1/approvals", headers=org.member.headers)
    [item] = [r for r in listed.json()["data"] if r["id"] == created["id"]]
    assert item["preview"] == preview and item["preview_hash"] == created["preview_hash"]


async def test_the_hash_is_of_the_canonical_form_whatever_the_order_sent(
    client: httpx.AsyncClient, org: Org
) -> None:
    content = 'Quote " backslash \\ tab \t newline \n é 漢字 🚀 \u007f'
    first = await create_approval(client, org.member, preview={"kind": "text", "content": content})
    raw = json.dumps({**approval_body(), "preview": {"content": content, "kind": "text"}})
    second = await client.post(
        "/api/v1/approvals",
        content=raw,
        headers={**org.member.headers, "Content-Type": "application/json"},
    )
    assert second.json()["preview_hash"] == first["preview_hash"]
    assert first["preview_hash"] == expected_hash({"kind": "text", "content": content})
    other = await create_approval(client, org.member, preview={"kind": "sql", "content": content})
    assert other["preview_hash"] != first["preview_hash"]


async def test_without_a_preview_both_are_null(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member)
    assert created["preview"] is None and created["preview_hash"] is None
    listed = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert listed.json()["data"][0]["preview"] is None


async def test_a_preview_past_the_size_limit_is_refused_naming_preview(
    client: httpx.AsyncClient, org: Org
) -> None:
    just_under = "x" * (256 * KIB - 40)
    assert (await create(client, org, {"kind": "text", "content": just_under})).status_code == 201
    over = await create(client, org, {"kind": "text", "content": "x" * (256 * KIB + 1)})
    assert refused_field(over) == ["preview"]
    # Escaping counts: the limit is of the preview as JSON.
    escaped = await create(client, org, {"kind": "text", "content": "\x01" * (50 * KIB)})
    assert refused_field(escaped) == ["preview"]


@pytest.mark.parametrize(
    ("preview", "field"),
    [
        ({"kind": "html", "content": "<b>x</b>"}, "preview.kind"),
        ({"kind": "", "content": "x"}, "preview.kind"),
        ({"content": "x"}, "preview.kind"),
        ({"kind": "text"}, "preview.content"),
        ({"kind": "text", "content": 42}, "preview.content"),
        ({"kind": "text", "content": {"a": 1}}, "preview.content"),
        ({"kind": "text", "content": "nul \x00"}, "preview.content"),
        ({"kind": "json", "content": "{not json"}, "preview.content"),
        ({"kind": "json", "content": '{"a": 1, "a": 2}'}, "preview.content"),
        ({"kind": "json", "content": "[NaN]"}, "preview.content"),
        ({"kind": "json", "content": "[1] [2]"}, "preview.content"),
        ({"kind": "json", "content": "[" * 33 + "]" * 33}, "preview.content"),
        ({"kind": "json", "content": "[" * 100_000}, "preview.content"),
        ({"kind": "email", "content": "Subject: hi\n\nbody"}, "preview.content"),
        (
            {"kind": "email", "content": "From: a\nTo: b\nSubject: c\nSubject: d\n\n"},
            "preview.content",
        ),
        ({"kind": "email", "content": "From: a\nTo b\nSubject: c\n\nbody"}, "preview.content"),
        ({"kind": "email", "content": " From: a"}, "preview.content"),
        ("just text", "preview"),
        (["text", "x"], "preview"),
    ],
)
async def test_malformed_previews_are_refused_naming_the_field(
    client: httpx.AsyncClient, org: Org, preview: Any, field: str
) -> None:
    assert refused_field(await create(client, org, preview)) == [field]


async def test_json_nested_as_deep_as_metadata_may_be_is_accepted(
    client: httpx.AsyncClient, org: Org
) -> None:
    content = "[" * 32 + "]" * 32
    assert (await create(client, org, {"kind": "json", "content": content})).status_code == 201


async def test_every_kind_on_the_request_page(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.member)
    expected = {
        "text": "Indented line kept as written.",
        "markdown": '<a href="https://runbooks.example.com/billing" rel="noopener nofollow">'
        "runbook</a>",
        "diff": '<tr class="diff-add"><td class="diff-num"></td><td class="diff-num">11</td>',
        "sql": '<span class="tok-k">DELETE</span>',
        "json": '<span class="json-key">&#34;order_id&#34;</span>',
        "email": "<dt>Subject</dt><dd>Your invoice format is changing on 1 March</dd>",
    }
    for kind, content in SAMPLES.items():
        created = await create_approval(
            client, org.member, preview={"kind": kind, "content": content}
        )
        page = (await client.get(f"/requests/{created['id']}")).text
        assert f'data-preview-kind="{kind}"' in page
        assert expected[kind] in page, kind
        assert created["preview_hash"] in page
    diff = (await client.get(f"/requests/{created['id']}")).text
    assert "Removed: " not in diff  # the e-mail's page: no diff markers
    page = (await client.get(f"/requests/{(await _diff(client, org))['id']}")).text
    assert '<span class="visually-hidden">Removed: </span>' in page
    assert '<span class="visually-hidden">Added: </span>' in page


async def _diff(client: httpx.AsyncClient, org: Org) -> dict[str, Any]:
    return await create_approval(
        client, org.member, preview={"kind": "diff", "content": SAMPLES["diff"]}
    )


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_hostile_content_of_every_kind_comes_out_escaped(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, kind: str
) -> None:
    await signed_in(ctx, client, org.member)
    created = await create_approval(
        client, org.member, preview={"kind": kind, "content": HOSTILE[kind]}
    )
    response = await client.get(f"/requests/{created['id']}")
    assert response.status_code == 200
    start = response.text.index('data-preview-kind="')
    shown = response.text[start : response.text.index("</section>", start)]
    tags = tags_of(shown)
    assert {name for name, _ in tags} <= SAFE_TAGS, tags
    attributes = {name for _, attrs in tags for name, _ in attrs}
    assert not {a for a in attributes if a.startswith("on") or a in ("src", "style")}
    hrefs = [value or "" for _, attrs in tags for name, value in attrs if name == "href"]
    assert all(href.startswith(("https:", "http:", "mailto:")) for href in hrefs), hrefs
    assert "&lt;script&gt;" in shown


async def test_markdown_links_are_nofollow_and_only_to_the_web(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.member)
    content = (
        "[web](https://example.com) [mail](mailto:ops@example.com) [js](javascript:alert(1)) "
        "[JS](JaVaScRiPt:alert(1)) [rel](/admin/users) [vb](vbscript:x) "
        "![pixel](https://tracker.example/p.gif) <https://auto.example>\n\n"
        "<div>raw html</div>\n\n# Heading"
    )
    created = await create_approval(
        client, org.member, preview={"kind": "markdown", "content": content}
    )
    page = (await client.get(f"/requests/{created['id']}")).text
    start = page.index('data-preview-kind="markdown"')
    shown = page[start : page.index("</section>", start)]
    assert '<a href="https://example.com" rel="noopener nofollow">web</a>' in shown
    assert '<a href="mailto:ops@example.com" rel="noopener nofollow">mail</a>' in shown
    assert '<a href="https://auto.example" rel="noopener nofollow">' in shown
    assert 'href="/admin' not in shown and "vbscript:x)" in shown
    assert "<img" not in shown
    assert 'href="https://tracker.example/p.gif"' in shown  # shown as a link, not loaded
    assert "&lt;div&gt;raw html&lt;/div&gt;" in shown
    assert "<h3>Heading</h3>" in shown  # below the page's own h1 and h2
    links = [attrs for name, attrs in tags_of(shown) if name == "a"]
    assert links and all(("rel", "noopener nofollow") in attrs for attrs in links)


async def test_a_big_json_preview_is_shown_as_text(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.member)
    content = json.dumps(list(range(6000)))
    created = await create_approval(
        client, org.member, preview={"kind": "json", "content": content}
    )
    page = (await client.get(f"/requests/{created['id']}")).text
    assert "6,001 values: shown as text." in page and "<details" not in page


@pytest.mark.parametrize(
    ("kind", "content", "formatted"),
    [
        ("markdown", "# Heading\n\n" + "word " * 14_000, "<h3>Heading</h3>"),
        ("sql", "SELECT 1;\n" * 7000, '<span class="tok-k">SELECT</span>'),
        ("diff", "@@ -1,5000 +1,5000 @@\n" + "+added\n" * 5000, 'class="diff-add"'),
    ],
)
async def test_previews_too_long_to_format_are_shown_as_written(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, kind: str, content: str, formatted: str
) -> None:
    await signed_in(ctx, client, org.member)
    created = await create_approval(client, org.member, preview={"kind": kind, "content": content})
    page = (await client.get(f"/requests/{created['id']}")).text
    assert "Too long to format: shown as written." in page
    assert formatted not in page
    assert content.splitlines()[0] in page
