"""``signoff secret-key``: a key for SIGNOFF_SECRET_KEY."""

from __future__ import annotations

import sys

from signoff.crypto import generate_secret_key


def secret_key() -> None:
    """Print a new random key for SIGNOFF_SECRET_KEY."""
    sys.stdout.write(generate_secret_key() + "\n")
