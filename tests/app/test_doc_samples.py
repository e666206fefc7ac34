"""Every code sample of the docs runs, as a reader would paste it, against a live server.

Samples are the ``python``, ``sh`` and ``bash`` fences of README.md, docs/ and the client's
README. Each runs unless the line before its fence says why it cannot here
(``<!-- not run: ... -->``: it starts a server, installs packages, needs a browser or a
framework that is not installed). The ``sh`` samples of one page run in order in one
shell, so a variable set by one (``$KEY``) is there for the next, as in a reader's
terminal. Every Python sample, run or not, is checked for names it never defines (the
``NameError`` a reader would meet at its end).

The server is the real ``signoff serve`` on a free loopback port, and ``127.0.0.1:8000``
in a sample is rewritten to it. A second user approves whatever is pending meanwhile, so
samples that wait for a decision get one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from signoff.crypto import generate_secret_key

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "clients" / "python" / "README.md",
]
FENCE = re.compile(r"^```(python|sh|bash)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (.+?) -->$")
DOCS_URL = "http://127.0.0.1:8000"
SAMPLE_TIMEOUT = 120
STARTUP_SECONDS = 60

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Sample:
    page: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def samples_of(page: Path) -> list[Sample]:
    lines = page.read_text().splitlines()
    found: list[Sample] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = lines[index - 1].strip() if index else ""
        reason = NOT_RUN.match(before)
        found.append(
            Sample(
                page, index + 1, opened.group(1), "\n".join(lines[index + 1 : end]) + "\n",
                reason.group(1) if reason else None,
            )
        )  # fmt: skip
        index = end + 1
    return found


ALL_SAMPLES = [sample for page in PAGES for sample in samples_of(page)]
PYTHON_SAMPLES = [sample for sample in ALL_SAMPLES if sample.language == "python"]


def test_the_docs_have_samples_to_run() -> None:
    # The extraction itself: a fence pattern that matched nothing would pass every test.
    run = [sample for sample in ALL_SAMPLES if sample.not_run is None]
    assert len(PYTHON_SAMPLES) >= 5
    assert {sample.language for sample in run} >= {"python", "sh"}
    assert any(sample.page.name == "README.md" for sample in run)


@pytest.mark.parametrize("sample", PYTHON_SAMPLES, ids=lambda sample: sample.where)
def test_python_samples_use_no_undefined_name(sample: Sample) -> None:
    ruff = Path(sys.executable).with_name("ruff")
    checked = subprocess.run(
        [str(ruff), "check", "--no-cache", "--isolated", "--select", "F821,F822",
         "--stdin-filename", "sample.py", "-"],
        input=sample.code, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, f"{sample.where}:\n{checked.stdout}{checked.stderr}"


# ---- the live server ----


@dataclass
class Live:
    base_url: str
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cli(env: dict[str, str], cwd: Path, *args: str) -> dict[str, str]:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("signoff")), *args, "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    data: dict[str, str] = json.loads(done.stdout)
    return data


def _approve_what_is_pending(base_url: str, key: str, stop: threading.Event) -> None:
    """A second person at the dashboard: approves every pending request it sees."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url + "/api/v1", headers=headers, timeout=10) as api:
        while not stop.wait(0.2):
            pending = api.get("/approvals", params={"status": "pending"}).json()
            for request in pending.get("data", []):
                api.patch(f"/approvals/{request['id']}", json={"decision": "approve"})


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    home = tmp_path_factory.mktemp("samples")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SIGNOFF_") or key.startswith("SIGNOFF_TEST_")
    }
    env["SIGNOFF_SECRET_KEY"] = generate_secret_key()
    env["SIGNOFF_DATABASE_URL"] = f"sqlite:///{home / 'signoff.db'}"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    env["SIGNOFF_PUBLIC_URL"] = base_url
    subprocess.run(
        [str(Path(sys.executable).with_name("signoff")), "db", "upgrade"],
        cwd=home, env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    # The people the samples act as: their own org, so the README's "Acme" is its own.
    _cli(env, home, "org", "create", "Samples")
    for email, role in (("ada@samples.example", "admin"), ("bo@samples.example", "member")):
        _cli(env, home, "user", "create", "--org", "Samples", "--email", email,
             "--name", email.split("@")[0].title(), "--role", role,
             "--password", "a long password")  # fmt: skip
    asking = _cli(env, home, "connection", "create", "--org", "Samples",
                  "--owner", "ada@samples.example", "--name", "samples-bot")  # fmt: skip
    deciding = _cli(env, home, "connection", "create", "--org", "Samples",
                    "--owner", "bo@samples.example", "--name", "approver")  # fmt: skip
    log = (home / "serve.log").open("w")
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("signoff")), "serve", "--port", str(port)],
        cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    stop = threading.Event()
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            assert server.poll() is None, (home / "serve.log").read_text()
            try:
                httpx.get(base_url + "/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (home / "serve.log").read_text()
                time.sleep(0.2)
        approver = threading.Thread(
            target=_approve_what_is_pending, args=(base_url, deciding["api_key"], stop)
        )
        approver.start()
        sample_env = {
            **env,
            "SIGNOFF_URL": base_url,
            "SIGNOFF_API_KEY": asking["api_key"],
            "ADMIN_KEY": asking["api_key"],
            "SIGNOFF_WEBHOOK_SECRET": asking["webhook_secret"],
        }
        yield Live(base_url, sample_env)
        stop.set()
        approver.join(timeout=10)
    finally:
        stop.set()
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _as_run_here(code: str, live: Live) -> str:
    signoff = str(Path(sys.executable).with_name("signoff"))
    return code.replace(DOCS_URL, live.base_url).replace(".venv/bin/signoff", signoff)


def _run(command: list[str], code: str, live: Live, where: str, cwd: Path) -> str:
    done = subprocess.run(
        command, input=_as_run_here(code, live), cwd=cwd, env=live.env,
        capture_output=True, text=True, timeout=SAMPLE_TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize(
    "sample",
    [s for s in PYTHON_SAMPLES if s.not_run is None],
    ids=lambda sample: sample.where,
)
def test_python_samples_run(sample: Sample, live: Live, tmp_path: Path) -> None:
    _run([sys.executable, "-"], sample.code, live, sample.where, tmp_path)


SHELL_PAGES = sorted(
    {s.page for s in ALL_SAMPLES if s.language in ("sh", "bash") and s.not_run is None}
)


@pytest.mark.parametrize("page", SHELL_PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_shell_samples_run_in_order(page: Path, live: Live, tmp_path: Path) -> None:
    samples = [s for s in samples_of(page) if s.language in ("sh", "bash") and s.not_run is None]
    script = "set -euo pipefail\n" + "".join(f"echo '--- {s.where}'\n{s.code}" for s in samples)
    if shutil.which("curl") is None and "curl" in script:
        pytest.fail("the samples need curl")
    output = _run(["bash", "-s"], script, live, str(page.relative_to(ROOT)), tmp_path)
    assert "error" not in output.lower(), output
