"""Passkeys: WebAuthn credentials for signing in and for signing decisions
(docs/passkeys.md)."""
