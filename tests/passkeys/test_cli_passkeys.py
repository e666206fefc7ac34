"""``signoff org passkeys ORG [off|critical|all]`` shows and sets the org's setting; any
other value is a clear error, on both databases."""

from __future__ import annotations

import pytest

from tests.app.test_cli_org import cli_env, run, run_json, said
from tests.conftest import Org

pytestmark = pytest.mark.anyio
__all__ = ["cli_env"]  # fixture


async def test_show_and_set_which_decisions_need_a_passkey(org: Org) -> None:
    assert (await run_json("org", "passkeys", org.name))["passkey_for"] == "off"
    assert (await run_json("org", "passkeys", org.name, "critical"))["passkey_for"] == "critical"
    assert "passkey_for: critical" in said(await run("org", "passkeys", org.id))
    refused = await run("org", "passkeys", org.name, "sometimes", expect=1)
    assert "off, critical or all" in said(refused)
    assert (await run_json("org", "passkeys", org.name))["passkey_for"] == "critical"
