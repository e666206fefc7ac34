"""``make bench-dashboard``: how fast the dashboard's pages answer in a large org.

One ``signoff serve`` on a fresh SQLite file, an org seeded through the API with
``--requests`` requests (10,000 by default, a fifth of them decided), a signed-in member
and a signed-in admin; then each page (the admin pages as the admin) is fetched
``--rounds`` times, one after another, and its p50, p95 and size are printed, with the
load average before and after. The issue's target: every page under 50 ms p95.
Figures, never assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.run import SIGNOFF, Server, bench_env, create_many, log, running, signoff_cli
from signoff.crypto import generate_secret_key

PASSWORD = "a long enough password"
TARGET_P95_MS = 50.0


def _seed(
    server: Server, env: dict[str, str], workdir: Path, requests: int
) -> tuple[str, str, str]:
    org = signoff_cli(env, workdir, "org", "create", "Bench", "--json")
    admin = signoff_cli(
        env, workdir, "user", "create", "--org", org["id"], "--email", "ann@bench.example",
        "--name", "Ann", "--role", "admin", "--password", PASSWORD, "--json",
    )  # fmt: skip
    member = signoff_cli(
        env, workdir, "user", "create", "--org", org["id"], "--email", "bob@bench.example",
        "--name", "Bob", "--password", PASSWORD, "--json",
    )  # fmt: skip
    key = signoff_cli(
        env, workdir, "connection", "create", "--org", org["id"], "--owner", admin["id"],
        "--name", "bench", "--rate-limit", "100000", "--json",
    )["api_key"]  # fmt: skip
    ids = create_many(server.url, key, 0, requests)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
        for index, request_id in enumerate(ids[: requests // 5]):
            decision = "approve" if index % 2 else "reject"
            api.patch(f"/api/v1/approvals/{request_id}", json={"decision": decision})
    return member["email"], admin["email"], ids[-1]


def _sign_in(http: httpx.Client, email: str) -> None:
    page = http.get("/signin")
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token, "no CSRF token on the sign-in page"
    answer = http.post(
        "/signin", data={"csrf_token": token.group(1), "email": email, "password": PASSWORD}
    )
    if answer.status_code != 303:
        raise SystemExit(f"sign-in failed: {answer.status_code}")


def _measure(http: httpx.Client, url: str, rounds: int) -> tuple[float, float, int]:
    http.get(url)  # warm: prepared statements, templates
    times = []
    size = 0
    for _ in range(rounds):
        started = time.perf_counter()
        answer = http.get(url)
        times.append((time.perf_counter() - started) * 1000)
        size = len(answer.content)
        if answer.status_code != 200:
            raise SystemExit(f"{url}: {answer.status_code}")
    times.sort()
    p95 = times[max(0, int(len(times) * 0.95) - 1)]
    return statistics.median(times), p95, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=200)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="signoff-bench-dashboard-") as tmp:
        workdir = Path(tmp)
        env = bench_env(f"sqlite:///{workdir / 'signoff.db'}", generate_secret_key())
        signoff_cli(env, workdir, "db", "upgrade")
        server = Server("signoff", [str(SIGNOFF), "serve"], env, workdir)
        with running(server):
            log(f"seeding {opts.requests:,} requests ...")
            email, admin_email, request_id = _seed(server, env, workdir, opts.requests)
            with (
                httpx.Client(base_url=server.url, timeout=30) as http,
                httpx.Client(base_url=server.url, timeout=30) as admin_http,
            ):
                _sign_in(http, email)
                _sign_in(admin_http, admin_email)
                member_pages = {
                    "inbox": "/",
                    "inbox, searched": "/?search=deploy",
                    "inbox page 5": "/?page=5",
                    "request": f"/requests/{request_id}",
                    "history": "/history",
                    "history, rejected": "/history?status=rejected",
                    "account": "/account",
                }
                # The admin's inbox is as long as the member's: a count-based request
                # waits for every user of the org.
                admin_pages = {
                    "connections": "/admin/connections",
                    "users": "/admin/users",
                    "oauth clients": "/admin/oauth-clients",
                    "deliveries": "/admin/deliveries",
                    "audit": "/admin/audit",
                    "emergency stop": "/admin/emergency-stop",
                }
                load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                log(f"each page {opts.rounds} times, one after another (target p95 < 50 ms);")
                log(f"load average at the start: {load}")
                measured = [(http, name, url) for name, url in member_pages.items()]
                measured += [(admin_http, name, url) for name, url in admin_pages.items()]
                for client, name, url in measured:
                    p50, p95, size = _measure(client, url, opts.rounds)
                    verdict = "met" if p95 < TARGET_P95_MS else "MISSED"
                    log(
                        f"  {name:<18} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  "
                        f"{size / 1024:6.1f} KB  {verdict}"
                    )
                load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                log(f"load average at the end: {load}")


if __name__ == "__main__":
    main()
