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
