"""Docs that must match the code."""

from __future__ import annotations

import re
from pathlib import Path

from signoff.config import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_setting_is_documented_and_nothing_else() -> None:
    text = (DOCS / "configuration.md").read_text()
    documented = set(re.findall(r"`SIGNOFF_([A-Z0-9_]+)`", text))
    settings = {name.upper() for name in Settings.model_fields}
    assert settings - documented == set(), "settings missing from docs/configuration.md"
    assert documented - settings == set(), "docs/configuration.md names unknown settings"


def test_documented_defaults_match() -> None:
    text = (DOCS / "configuration.md").read_text()
    defaults = Settings.model_construct()
    for name in Settings.model_fields:
        row = re.search(rf"^\| `SIGNOFF_{name.upper()}` \| ([^|]+) \|", text, re.MULTILINE)
        assert row, name
        cell = row.group(1).strip().strip("`")
        value = getattr(defaults, name)
        if value in (None, []) or isinstance(value, list):
            continue  # described in words ("unset", "empty", "1,2,4")
        if isinstance(value, bool):
            assert cell == str(value).lower(), name
        elif isinstance(value, int | float):
            assert float(cell) == float(value), (name, cell, value)
        else:
            assert cell == str(value), (name, cell, value)


REPO = DOCS.parent
# [text](target) and ![alt](target); autolinks (<https://…>) are never relative.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _outside_fences(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: the heading's text lowercased,
    punctuation dropped, spaces to hyphens, and -1, -2, … for repeats."""
    seen: dict[str, int] = {}
    for line in _outside_fences(text):
        if heading := _HEADING.match(line):
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, 0) + 1
            if seen[slug] > 1:
                seen[f"{slug}-{seen[slug] - 1}"] = 1
    return set(seen)


def _relative_links(page: Path) -> list[str]:
    prose = (re.sub(r"`[^`]*`", "", line) for line in _outside_fences(page.read_text()))
    return [
        target
        for line in prose
        for target in _LINK.findall(line)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def test_relative_links_in_the_docs_lead_somewhere() -> None:
    broken = []
    pages = [REPO / "README.md", *sorted(DOCS.rglob("*.md")), *sorted(REPO.glob("bench/**/*.md"))]
    for page in pages:
        for link in _relative_links(page):
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.name}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text()):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert broken == []


def test_the_link_check_finds_links_and_headings() -> None:
    page = "# Top\n\n## API throughput (`make bench`)\n\n## Top\n\n```\n## not one\n```\n"
    assert _anchors(page) == {"top", "api-throughput-make-bench", "top-1"}
    readme_links = _relative_links(REPO / "README.md")
    assert "docs/architecture.md" in readme_links
    assert "docs/decisions/README.md" in readme_links


def test_decision_records_are_short_and_each_is_in_the_index() -> None:
    decisions = DOCS / "decisions"
    index = (decisions / "README.md").read_text()
    records = sorted(decisions.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert records, "no decision records"
    for record in records:
        assert len(record.read_text().splitlines()) <= 60, f"{record.name}: over 60 lines"
        number = record.name[:4]
        assert re.search(rf"^- \[?{number} ", index, re.MULTILINE), f"{number} not in the index"


def test_the_performance_page_stays_readable() -> None:
    text = (DOCS / "performance.md").read_text()
    assert len(text.splitlines()) <= 300
    for heading in ("## What one process serves", "## Reproduce", "## Tuning"):
        assert heading in text
