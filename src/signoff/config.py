"""Operator settings, read from ``SIGNOFF_*`` environment variables.

Every setting has a default that serves the embedded single-process mode (one SQLite
file in the working directory, in-memory rate-limit counters). ``docs/configuration.md``
lists them all; keep the two in step.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def normalize_database_url(url: str) -> str:
    """Accept the URLs operators write and map them to the async drivers we use."""
    if url.startswith(("postgres://", "postgresql://")):
        return "postgresql+asyncpg://" + url.split("://", 1)[1]
    if url.startswith("sqlite://") and not url.startswith("sqlite+aiosqlite://"):
        return "sqlite+aiosqlite://" + url.split("://", 1)[1]
    return url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SIGNOFF_", extra="ignore")

    env: Literal["development", "production"] = "development"
    database_url: str = "sqlite+aiosqlite:///./signoff.db"
    redis_url: str | None = None
    # Key for secrets that must be readable again (webhook secrets, callback headers).
    # Unset in development: a key file is created beside the database (see crypto.py).
    secret_key: str | None = None
    secret_key_file: str = "./signoff.key"
    log_level: str = "info"

    # Rate limits (decisions.md section 7).
    rate_limit_default: int = Field(100, ge=1)
    rate_limit_ceiling: int = Field(10_000, ge=1)
    rate_limit_unauthenticated: int = Field(100, ge=1)
    rate_limit_scope: Literal["all", "writes"] = "all"
    rate_limit_reads_per_minute: int = Field(600, ge=1)

    # Operator-wide emergency stop (decisions.md section 8).
    emergency_stop: bool = False

    # Input limits (decisions.md section 6).
    max_body_bytes: int = Field(1024 * 1024, ge=1024)
    max_title_length: int = 200
    max_description_length: int = 10_000
    max_comment_length: int = 10_000
    max_label_length: int = 100
    max_idempotency_key_length: int = 255
    max_metadata_bytes: int = 64 * 1024
    # A request's preview (kind and content) as JSON; the body limit above bounds it too.
    max_preview_bytes: int = Field(256 * 1024, ge=1024)
    # Objects and arrays inside one another in metadata (and in any body); deeper nesting
    # is refused at create, so nothing stored can fail to be encoded again.
    max_metadata_depth: int = Field(32, ge=1, le=200)
    # A request's `arguments` (and its `arguments_schema`), as JSON; nested as metadata.
    max_arguments_bytes: int = Field(64 * 1024, ge=1024)
    max_callback_headers: int = 20
    max_callback_header_value_length: int = 1024
    max_required_approvals: int = 20
    max_steps: int = 20

    # Operations (docs/operations.md): Prometheus metrics at /metrics, and the bearer
    # token a scraper must send there (unset: none, keep /metrics off public networks).
    metrics_enabled: bool = True
    metrics_token: str | None = None

    # Retention (docs/operations.md): workers purge finished requests decided more than
    # this many days ago, every hour. Unset: nothing is purged but by `signoff purge`.
    retention_days: int | None = Field(None, ge=1)

    # Background work.
    expiry_sweep_interval_seconds: float = Field(1.0, gt=0)
    long_poll_max_seconds: int = Field(60, ge=0, le=300)
    long_poll_recheck_seconds: float = Field(1.0, gt=0)

    # Decision callbacks (interface.md section 6, decisions.md section 9, docs/callbacks.md).
    # Each attempt has one deadline (connect, send, answer and capped read together).
    delivery_timeout_seconds: float = Field(10.0, gt=0)
    # Delays before retry 1, 2, 3 (JSON list or comma-separated); attempts = 1 + count.
    delivery_retry_delays_seconds: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [1.0, 2.0, 4.0]
    )
    # How long a claimed delivery stays with its claimant; past it, any worker takes over.
    # Must exceed the attempt deadline, or slow attempts would be taken over mid-flight.
    delivery_lease_seconds: float = Field(30.0, gt=0)
    # Attempts one worker runs at once, and at most per receiver (host:port).
    delivery_concurrency: int = Field(200, ge=1)
    delivery_per_target_concurrency: int = Field(16, ge=1)
    # Longest sleep of an idle worker without a wake-up (SQLite across processes).
    delivery_poll_interval_seconds: float = Field(1.0, gt=0)
    # At most this much of a receiver's answer is read; the first 1 KiB is logged.
    delivery_response_read_bytes: int = Field(64 * 1024, ge=1024)
    # Private networks production callbacks may reach (CIDRs; JSON list or comma-separated).
    callback_allowed_cidrs: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # OAuth 2.0 (docs/oauth.md). The issuer (`iss`) and every advertised endpoint are
    # built from public_url, never from the request's Host header, which a caller controls.
    public_url: str = "http://127.0.0.1:8000"
    oauth_access_token_ttl_seconds: int = Field(3600, ge=60)
    oauth_refresh_token_ttl_seconds: int = Field(30 * 24 * 3600, ge=60)
    oauth_code_ttl_seconds: int = Field(600, ge=10, le=600)
    # OpenID CIBA (docs/ciba.md): the least time between two polls of one auth_req_id
    # (``interval``; 0 turns slow_down off), and how long a request lives when the client
    # sends no requested_expiry, and at most.
    ciba_interval_seconds: int = Field(5, ge=0, le=60)
    ciba_default_expiry_seconds: int = Field(600, ge=10)
    ciba_max_expiry_seconds: int = Field(24 * 3600, ge=10)
    session_ttl_seconds: int = Field(12 * 3600, ge=60)
    # How long an invitation's or a password reset's one-time link works (needs smtp_url).
    invitation_ttl_hours: int = Field(72, ge=1, le=24 * 30)
    login_attempts_per_hour: int = Field(30, ge=1)

    # Approval receipts (docs/receipts.md): the longest `receipt_ttl_seconds` a request
    # may ask for (the default is 900).
    receipt_ttl_max_seconds: int = Field(24 * 3600, ge=60)
    # How often a process looks for a newer signing key (`signoff keys rotate`).
    signing_key_refresh_seconds: float = Field(60.0, gt=0)
    # The audit chain (docs/audit.md): the worker seals new events this often, re-checks
    # the stored chain this often, and signs the org's head after this many new events or
    # this many seconds, whichever first.
    audit_seal_interval_seconds: float = Field(1.0, gt=0)
    audit_verify_interval_seconds: float = Field(30.0, gt=0)
    audit_checkpoint_events: int = Field(1000, ge=1)
    audit_checkpoint_seconds: float = Field(300.0, gt=0)

    # Older clients of the interface (docs/configuration.md): a deviation from it while on.
    compat_legacy_clients: bool = False

    # Notifications (docs/notifications.md). public_url above makes the links in messages.
    # smtp://user:pass@host:port (``?starttls=true`` to upgrade), or smtps:// (implicit TLS).
    smtp_url: str | None = None
    # A PEM file of the CAs that sign the SMTP server's certificate (a private CA), in
    # place of the system's; certificates are always verified.
    smtp_ca_file: str | None = None
    mail_from: str = "signoff <signoff@localhost>"
    # Slack's Web API (users.info, for the Slack app's buttons); tests point it elsewhere.
    slack_api_url: str = "https://slack.com/api"
    notification_timeout_seconds: float = Field(10.0, gt=0)
    # A claimed notification stays with its sender this long; past it, any worker sends it.
    notification_lease_seconds: float = Field(60.0, gt=0)
    # At most one message per chat channel per interval: a burst becomes one digest.
    notification_chat_interval_seconds: float = Field(1.0, ge=0)
    notification_poll_interval_seconds: float = Field(1.0, gt=0)

    @field_validator("public_url")
    @classmethod
    def _strip_public_url(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("delivery_retry_delays_seconds", "callback_allowed_cidrs", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("delivery_retry_delays_seconds")
    @classmethod
    def _check_delays(cls, value: list[float]) -> list[float]:
        if any(delay < 0 for delay in value):
            raise ValueError("retry delays must not be negative")
        return value

    @field_validator("callback_allowed_cidrs")
    @classmethod
    def _check_cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            ipaddress.ip_network(cidr, strict=False)  # raises ValueError when malformed
        return value

    @model_validator(mode="after")
    def _lease_outlasts_attempt(self) -> Settings:
        if self.delivery_lease_seconds <= self.delivery_timeout_seconds:
            raise ValueError(
                "SIGNOFF_DELIVERY_LEASE_SECONDS must exceed SIGNOFF_DELIVERY_TIMEOUT_SECONDS"
            )
        return self

    @field_validator("smtp_ca_file")
    @classmethod
    def _check_ca_file(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ssl.create_default_context(cafile=value)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(
                    f"SIGNOFF_SMTP_CA_FILE: no PEM certificates could be read from {value}"
                ) from exc
        return value

    @field_validator("database_url")
    @classmethod
    def _normalize_database_url(cls, value: str) -> str:
        return normalize_database_url(value)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def is_production(self) -> bool:
        return self.env == "production"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
