"""``signoff routing set|show`` as an operator runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Org
from tests.webhooks.test_cli import signoff

pytestmark = pytest.mark.anyio

ROUTING_YAML = """\
channels:
  team:
    type: slack
    webhook_url: https://hooks.slack.example/services/T0/B0/secretsecretsecret
  mail:
    type: email
rules:
  - name: deploys
    match: {action_type: "deploy.*"}
    channels: [team]
  - name: critical
    match: {priority: [critical]}
    channels: [mail]
    audience: admins
    escalation: {after_minutes: 30, audience: {users: [member1@acme.example]}}
"""


async def test_set_from_yaml_then_show_masks_the_secrets(
    org: Org, database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "routing.yaml"
    path.write_text(ROUTING_YAML)
    code, _, err = await signoff(
        database_url, "routing", "set", "--org", "Acme", "--file", str(path)
    )
    assert code == 0, err
    assert "2 channels, 2 rules" in err
    code, shown, err = await signoff(database_url, "routing", "show", "--org", org.id)
    assert code == 0, err
    assert shown is not None
    assert [rule["name"] for rule in shown["rules"]] == ["deploys", "critical"]
    assert shown["channels"]["mail"] == {"type": "email"}
    assert shown["channels"]["team"]["webhook_url"] == "https://hooks.slack.example/…cret"


async def test_set_refuses_a_wrong_file_naming_the_field(
    org: Org, database_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "routing.json"
    path.write_text('{"channels": {}, "rules": [{"channels": ["nowhere"]}]}')
    code, _, err = await signoff(
        database_url, "routing", "set", "--org", "Acme", "--file", str(path)
    )
    assert code == 1
    assert "rules.0.channels.0" in err
    code, shown, _ = await signoff(database_url, "routing", "show", "--org", "Acme")
    assert shown == {"channels": {}, "rules": []}
