"""Previews of every kind, plain and hostile, shared by the preview tests."""

from __future__ import annotations

import json

SAMPLES: dict[str, str] = {
    "text": "Rotate the analytics database password.\n\n  Indented line kept as written.\n"
    + "A long line that must wrap inside the box. " * 6,
    "markdown": (
        "# Release notes\n\nShips **billing v2** to every region.\n\n"
        "- retries with backoff\n- EU tax tables\n\n"
        "| Region | Rollout |\n|---|---|\n| eu-west-1 | 10:00 |\n| us-east-1 | 11:00 |\n\n"
        "See the [runbook](https://runbooks.example.com/billing) first.\n\n"
        "```\nkubectl rollout status deploy/billing\n```\n"
    ),
    "diff": (
        "diff --git a/billing/config.py b/billing/config.py\n"
        "--- a/billing/config.py\n+++ b/billing/config.py\n"
        "@@ -10,6 +10,7 @@ class Settings:\n"
        "     region: str = 'eu-west-1'\n"
        "-    retries: int = 0\n"
        "+    retries: int = 3\n"
        "+    retry_backoff_seconds: float = 0.5  # a long comment that makes this line "
        "wider than any phone: it must scroll inside the box, never the page\n"
        "     timeout: float = 10.0\n"
        "-    tax_tables: str = 'v1'\n"
        "+    tax_tables: str = 'v2'\n"
        "     currency: str = 'EUR'\n"
    ),
    "sql": (
        "-- Remove accounts closed more than seven years ago\n"
        "DELETE FROM customer_accounts\n"
        "WHERE closed_at < now() - interval '7 years'\n"
        "  AND legal_hold = false\n"
        "  AND id NOT IN (SELECT account_id FROM open_invoices WHERE amount_cents > 0);"
    ),
    "json": json.dumps(
        {
            "action": "refund",
            "order_id": 48213,
            "amount": {"value": "129.00", "currency": "EUR"},
            "lines": [{"sku": "BK-2", "qty": 1}, {"sku": "SHIP", "qty": 1}],
            "notify_customer": True,
            "note": None,
        }
    ),
    "email": (
        "From: Billing <billing@acme.example>\n"
        "To: all-customers@acme.example\n"
        "Subject: Your invoice format is changing on 1 March\n"
        "\n"
        "Hello,\n\nFrom 1 March your invoices show VAT per line.\n"
        "Nothing changes in what you pay.\n\n— The Acme billing team\n"
    ),
}

# Hostile content of every kind: none of it may reach the page as markup.
SCRIPT = "<script>alert(1)</script>"
HOSTILE: dict[str, str] = {
    "text": f"{SCRIPT}<img src=x onerror=alert(1)>",
    "markdown": (
        f"{SCRIPT}\n\n<b onclick=alert(1)>raw</b>\n\n[click](javascript:alert(1)) "
        "<javascript:alert(2)> [data](data:text/html,<script>x</script>) "
        '[ok](https://example.com/"onmouseover=alert(1)) ![img](javascript:alert(3))\n\n'
        f"```\n{SCRIPT}\n```\n"
    ),
    "diff": f"--- a/{SCRIPT}\n+++ b/x\n@@ -1,1 +1,1 @@\n-{SCRIPT}\n+<img src=x onerror=alert(1)>\n",
    "sql": f"SELECT '{SCRIPT}' AS \"</code></pre>{SCRIPT}\" -- {SCRIPT}",
    "json": json.dumps({SCRIPT: [SCRIPT, {"<b>": "</pre><img src=x onerror=alert(1)>"}]}),
    "email": f"From: {SCRIPT}\nTo: <b>x</b>\nSubject: {SCRIPT}\n\n{SCRIPT}\n",
}
