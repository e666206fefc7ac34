"""deploy/: the compose file and the image definition of docs/scale-out.md.

Parsed with PyYAML and checked for what a fleet needs to be one deployment: every signoff
process shares the secret key, database and Redis; replicas are API-only; one worker;
the schema migrated once before any of them starts. ``docker compose config`` checks the
file as Compose reads it wherever the Compose plugin is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from signoff.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SHARED = ("SIGNOFF_SECRET_KEY", "SIGNOFF_DATABASE_URL", "SIGNOFF_REDIS_URL", "SIGNOFF_ENV")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return data


def _signoff_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("image") == "signoff:local"
    }


def test_the_fleet_is_two_api_replicas_one_worker_and_a_migration(
    compose: dict[str, Any],
) -> None:
    services = _signoff_services(compose)
    commands = {name: service["command"] for name, service in services.items()}
    replicas = [name for name, command in commands.items() if command[0] == "serve"]
    assert len(replicas) == 2
    for name in replicas:
        assert "--no-worker" in commands[name], name
        assert commands[name][commands[name].index("--host") + 1] == "0.0.0.0"
    assert [name for name, c in commands.items() if c == ["worker"]] == ["worker"]
    assert commands["migrate"] == ["db", "upgrade"]
    assert services["migrate"]["restart"] == "no"
    # Nothing serves or works before the schema is current.
    for name in (*replicas, "worker"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }, name
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert {"postgres", "redis"} <= set(compose["services"])


def test_every_process_shares_the_key_database_and_redis(compose: dict[str, Any]) -> None:
    services = _signoff_services(compose)
    environments = [service["environment"] for service in services.values()]
    for name in SHARED:
        values = {env.get(name) for env in environments}
        assert len(values) == 1 and None not in values, (name, values)
    env = environments[0]
    assert env["SIGNOFF_SECRET_KEY"].startswith("${SIGNOFF_SECRET_KEY:?")  # never a literal
    assert env["SIGNOFF_ENV"] == "production"
    # The database and Redis the environment names are the services of this file.
    assert "@postgres:5432/signoff" in env["SIGNOFF_DATABASE_URL"]
    assert env["SIGNOFF_REDIS_URL"].startswith("redis://redis:6379/")
    postgres = compose["services"]["postgres"]["environment"]
    assert env["SIGNOFF_DATABASE_URL"].startswith(
        f"postgresql://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@"
    )
    # Only settings signoff knows, so a typo cannot pass unnoticed.
    known = {f"SIGNOFF_{name.upper()}" for name in Settings.model_fields}
    for environment in environments:
        unknown = {name for name in environment if name.startswith("SIGNOFF_")} - known
        assert not unknown, unknown
    # Replicas take the balancer's X-Forwarded-For (uvicorn's own setting).
    for service in services.values():
        if service["command"][0] == "serve":
            assert service["environment"]["FORWARDED_ALLOW_IPS"] == "*"


def test_the_load_balancer_spreads_over_both_replicas(compose: dict[str, Any]) -> None:
    replicas = [
        name
        for name, service in _signoff_services(compose).items()
        if service["command"][0] == "serve"
    ]
    config = (DEPLOY / "nginx.conf").read_text()
    for name in replicas:
        assert f"server {name}:8000" in config
        lb_depends = compose["services"]["lb"]["depends_on"][name]
        assert lb_depends == {"condition": "service_healthy"}
        healthcheck = " ".join(compose["services"][name]["healthcheck"]["test"])
        assert "/readyz" in healthcheck


def test_the_image_is_built_from_the_projects_own_files(compose: dict[str, Any]) -> None:
    for service in _signoff_services(compose).values():
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line.strip()]
    instructions = [i for i in instructions if not i[0].startswith("#")]
    assert instructions[0] == ["FROM", "python:3.11-slim"]
    copied = [i[1].split()[:-1] for i in instructions if i[0] == "COPY"]
    sources = {source for sources in copied for source in sources}
    # The server, and the client library whose tools the remote MCP endpoint runs.
    assert sources == {"pyproject.toml", "constraints.txt", "README.md", "src", "clients/python"}
    assert all((ROOT / source).exists() for source in sources)
    assert "pip install -c constraints.txt ./clients/python[mcp] ." in dockerfile
    assert ["ENTRYPOINT", '["signoff"]'] in instructions
    assert ["USER", "signoff"] in instructions


def _compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(
        ["docker", "compose", "version"], capture_output=True, text=True, check=False
    )
    return probe.returncode == 0


def test_docker_compose_reads_the_file() -> None:
    if not _compose_available():
        pytest.skip("the Docker Compose plugin is not installed: the file was parsed above")
    result = subprocess.run(
        ["docker", "compose", "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"],
        env={**os.environ, "SIGNOFF_SECRET_KEY": "k" * 44, "POSTGRES_PASSWORD": "p"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
