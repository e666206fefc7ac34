"""``signoff policy set|show|test`` as an operator runs them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import Org, create_approval
from tests.webhooks.test_cli import signoff

pytestmark = pytest.mark.anyio

POLICY_YAML = """\
rules:
  - name: small-refunds
    condition: request.action_type == "refund.issue" && request.arguments.amount <= 50
    effect: auto_approve
    budget: {per: day, max_sum: 5000, sum_of: amount}
"""


async def test_set_show_and_test(
    client: httpx.AsyncClient, org: Org, database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_YAML)
    code, _, err = await signoff(
        database_url, "policy", "set", "--org", "Acme", "--file", str(path)
    )
    assert code == 0, err
    assert "version 1, 1 rules" in err
    code, shown, err = await signoff(database_url, "policy", "show", "--org", org.id)
    assert code == 0 and shown is not None, err
    assert shown["version"] == 1 and shown["rules"][0]["name"] == "small-refunds"
    created = await create_approval(
        client, org.member, action_type="refund.issue", arguments={"amount": 7}
    )
    assert created["status"] == "approved"
    code, tested, err = await signoff(
        database_url, "policy", "test", "--org", "Acme", "--file", str(path), "--days", "2"
    )
    assert code == 0 and tested is not None, err
    assert tested["rules"][0]["matched"] == 1


async def test_set_refuses_a_condition_that_does_not_compile(
    org: Org, database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"rules": [{"name": "x", "condition": "1 +", "effect": "auto_approve"}]}')
    code, _, err = await signoff(
        database_url, "policy", "set", "--org", "Acme", "--file", str(path)
    )
    assert code == 1
    assert "rules.0.condition" in err
