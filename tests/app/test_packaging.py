"""Both distributions as a packager builds them and a user installs them: ``python -m
build`` on the checkout's own files, each wheel into an empty virtualenv, nothing taken
from this repository but the wheels (and the constraints file, for the same versions).

The server must not depend on ``signoff-client``, which exists only here: it ships the
client's package (its MCP tools serve ``/mcp``) from the one source folder both use.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import venv
from pathlib import Path

import httpx
import pytest

import signoff

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 600
STARTUP_SECONDS = 60

pytestmark = pytest.mark.slow


def _checkout_files(destination: Path) -> Path:
    """The files a fresh clone has (tracked, plus new ones not ignored), nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def _build_wheel(project: Path, outdir: Path) -> Path:
    before = set(outdir.glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(project)],
        check=True, capture_output=True, timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    (wheel,) = set(outdir.glob("*.whl")) - before
    return wheel


def _empty_env(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin"


def _pip_install(bin_dir: Path, requirement: str) -> None:
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", "-c", str(ROOT / "constraints.txt"), requirement],
        check=True, capture_output=True, timeout=INSTALL_TIMEOUT,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    checkout = _checkout_files(tmp_path_factory.mktemp("checkout"))
    dist = tmp_path_factory.mktemp("dist")
    return {
        "server": _build_wheel(checkout, dist),
        "client": _build_wheel(checkout / "clients" / "python", dist),
    }


def test_the_server_wheel_installs_alone_and_serves(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    bin_dir = _empty_env(tmp_path / "env")
    _pip_install(bin_dir, str(wheels["server"]))
    python = str(bin_dir / "python")
    # The MCP tools of /mcp come with it: no signoff-client distribution is installed.
    probe = (
        "import importlib.metadata as m, httpx;"
        "from signoff.remote_mcp.sdk import build_mcp_server;"
        "assert 'signoff-client' not in {d.metadata['Name'] for d in m.distributions()};"
        "print(build_mcp_server(httpx.AsyncClient(), bytes(32)).name)"
    )
    shown = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "signoff"

    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "SIGNOFF_DATABASE_URL": f"sqlite:///{tmp_path / 'signoff.db'}",
    }
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [str(bin_dir / "signoff"), "serve", "--port", str(port)],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.2)
        assert health.json() == {"status": "ok"}
        document = httpx.get(f"http://127.0.0.1:{port}/api/v1/openapi.json", timeout=10)
        assert document.json()["info"]["version"] == signoff.__version__
        # A template and a stylesheet are package data: the sign-in page renders, styled.
        sign_in = httpx.get(f"http://127.0.0.1:{port}/signin", timeout=10)
        assert sign_in.status_code == 200 and "<form" in sign_in.text
        icon = httpx.get(f"http://127.0.0.1:{port}/favicon.ico", timeout=10)
        assert icon.status_code == 200 and icon.content
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_the_client_wheel_installs_without_the_server(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    bin_dir = _empty_env(tmp_path / "env")
    _pip_install(bin_dir, f"signoff-client[mcp] @ {wheels['client'].as_uri()}")
    shown = subprocess.run(
        [str(bin_dir / "signoff-mcp"), "--version"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"signoff-mcp {signoff.__version__}"
    alone = subprocess.run(
        [str(bin_dir / "python"), "-c", "import signoff_client.mcp_server; import signoff"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "No module named 'signoff'" in alone.stderr
