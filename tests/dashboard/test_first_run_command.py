"""First run as an operator meets it: ``signoff serve`` on an empty database logs a
one-time setup link; the link creates the org and its admin, then stops working, and a
restart on the now set-up database logs no link."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from signoff.crypto import generate_secret_key
from tests.oauth.support import PASSWORD

LINK = re.compile(r"(http://127\.0\.0\.1:\d+/setup/[A-Za-z0-9_-]+)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _serve(workdir: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    script = Path(sys.executable).with_name("signoff")
    process = subprocess.Popen(
        [str(script), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=workdir,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return process, base_url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(log.read_text())
        time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()


def test_serve_logs_a_one_time_setup_link(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}",
        "SIGNOFF_SECRET_KEY": generate_secret_key(),
        "SIGNOFF_LOG_LEVEL": "warning",
    }
    env.pop("SIGNOFF_PUBLIC_URL", None)
    env.pop("SIGNOFF_REDIS_URL", None)
    process, base_url = _serve(tmp_path, env, tmp_path / "first.log")
    try:
        found = LINK.search((tmp_path / "first.log").read_text())
        assert found, (tmp_path / "first.log").read_text()
        link = found.group(1)
        assert link.startswith(base_url + "/setup/")
        with httpx.Client(base_url=base_url) as browser:
            assert browser.get(link).status_code == 200
            done = browser.post(
                link,
                data={
                    "org_name": "Acme",
                    "name": "Ada",
                    "email": "ada@acme.example",
                    "password": PASSWORD,
                },
            )
            assert done.status_code == 303
            assert "Ada" in browser.get("/").text
            assert browser.get(link).status_code == 409
    finally:
        _stop(process)
    process, _ = _serve(tmp_path, env, tmp_path / "second.log")
    _stop(process)
    assert not LINK.search((tmp_path / "second.log").read_text())
