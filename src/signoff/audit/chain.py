"""The chain's pure rules: an event's canonical form, its hash, and the offline verifier.

Nothing here touches the database: ``signoff audit verify`` runs this on an export alone.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import rfc8785
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import OKPKey

from signoff.audit import canonical
from signoff.passkeys.proof import PasskeyRefused, verify_stored_assertion

GENESIS_HASH = "0" * 64
# The event that carries a vote's passkey assertion (passkeys/service.py).
PASSKEY_SIGNED = "passkey.signed"
PASSKEY_REGISTERED = "passkey.registered"
CHECKPOINT_TYPE = "signoff-audit-checkpoint+jwt"
EVENT_FIELDS = ("seq", "id", "org_id", "request_id", "type", "actor_id", "data", "created_at")


def chain_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds: what both databases store, so it reads back
    the same as it was hashed."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    elif value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    if value.year < 1000:  # isoformat pads the year to four digits, strftime may not
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # The same text as the strftime above, in a third of its time (the sealer and the
    # re-check write one per event).
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _text(value: uuid.UUID | str | None) -> str | None:
    return None if value is None else str(value)


def canonical_event(
    *,
    seq: int,
    id: uuid.UUID | str,
    org_id: uuid.UUID | str,
    request_id: uuid.UUID | str | None,
    type: str,
    actor_id: uuid.UUID | str | None,
    data: Any,
    created_at: datetime | str,
    prev_hash: str,
) -> dict[str, Any]:
    """The JSON object an event's hash is taken over (docs/audit.md, "The hash rule")."""
    return {
        "seq": seq,
        "id": _text(id),
        "org_id": _text(org_id),
        "request_id": _text(request_id),
        "type": type,
        "actor_id": _text(actor_id),
        "data": data if data is not None else {},
        "created_at": created_at if isinstance(created_at, str) else chain_timestamp(created_at),
        "prev_hash": prev_hash,
    }


def event_hash(form: dict[str, Any]) -> str:
    """Lowercase hex SHA-256 of the RFC 8785 form of ``form`` (an event's canonical
    object); ``canonical.dumps`` gives ``rfc8785.dumps``'s bytes, faster."""
    return hashlib.sha256(canonical.dumps(form)).hexdigest()


def checkpoint_payload(
    org_id: uuid.UUID | str, kind: str, seq: int, head_hash: str, at: datetime
) -> bytes:
    """What a checkpoint signs (RFC 8785, so any language can rebuild and compare it)."""
    return canonical.dumps(
        {
            "iss": "signoff",
            "org_id": str(org_id),
            "kind": kind,
            "seq": seq,
            "hash": head_hash,
            "iat": int(at.timestamp()),
        }
    )


# ---- verifying an export ----


@dataclass
class VerifyResult:
    ok: bool
    events: int
    checkpoints: int
    last_seq: int | None
    problem: str | None = None
    problem_seq: int | None = None


class ChainBroken(Exception):
    def __init__(self, message: str, seq: int | None) -> None:
        super().__init__(message)
        self.seq = seq


KeyLookup = Callable[[str], OKPKey | None]


def parse_lines(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The export's records, one JSON object a line; CloudEvents envelopes unwrapped."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ChainBroken(f"line {number} is not JSON", None) from None
        if not isinstance(record, dict):
            raise ChainBroken(f"line {number} is not a JSON object", None)
        if "specversion" in record:  # CloudEvents 1.0: the record is its data
            record = record.get("data")
            if not isinstance(record, dict):
                raise ChainBroken(f"line {number} has no data object", None)
        yield record


def _check_signature(record: dict[str, Any], keys: KeyLookup | None) -> None:
    seq = record.get("seq")
    token = record.get("jws")
    if not isinstance(token, str):
        raise ChainBroken(f"checkpoint #{seq} has no signature", seq)
    if keys is None:
        return
    try:
        header = json.loads(_b64(token.split(".")[0]))
        if header.get("typ") != CHECKPOINT_TYPE:
            raise ChainBroken(f"checkpoint #{seq} is not signed as a checkpoint", seq)
        key = keys(str(header.get("kid")))
        if key is None:
            raise ChainBroken(f"checkpoint #{seq} is signed by unknown key", seq)
        signed = jws.deserialize_compact(token, key, algorithms=["Ed25519", "EdDSA"])
        payload = json.loads(signed.payload)
    except (JoseError, ValueError, IndexError):
        raise ChainBroken(f"checkpoint #{seq} has an invalid signature", seq) from None
    signed_fields = ("org_id", "kind", "seq", "hash")
    exported = (record.get("org_id"), record.get("checkpoint"), seq, record.get("hash"))
    if tuple(payload.get(field) for field in signed_fields) != exported:
        raise ChainBroken(f"checkpoint #{seq} does not match what was signed", seq)


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _classify(event: dict[str, Any], following: dict[str, Any] | None, prev: str) -> str:
    """Name what happened at the first event that does not fit the chain."""
    seq = event.get("seq")
    if following is not None and following.get("prev_hash") == prev:
        if event.get("prev_hash") == following.get("hash"):
            return f"event #{seq} was reordered (swapped with the next)"
        return f"event #{seq} was inserted"
    return f"event #{seq} was changed"


class _Verifier:
    """The running state of a verification: the next seq and hash the chain must show."""

    def __init__(self, keys: KeyLookup | None) -> None:
        self.keys = keys
        self.events = self.checkpoints = 0
        self.expected: int | None = None
        self.prev: str | None = None
        self.last_seq: int | None = None
        self.last_hash: str | None = None  # only the last: memory stays flat
        # Each passkey registered in the chain: credential id -> public key.
        self.registered: dict[str, str] = {}

    def checkpoint(self, record: dict[str, Any]) -> None:
        self.checkpoints += 1
        _check_signature(record, self.keys)
        seq = record.get("seq")
        if not isinstance(seq, int):
            raise ChainBroken("a checkpoint has no seq", None)
        if record.get("checkpoint") == "pruned" and self.last_seq is None:
            self.expected, self.prev = seq + 1, record.get("hash")
            return
        if self.last_seq is None or seq > self.last_seq:
            done = self.last_seq or 0
            raise ChainBroken(
                f"events after #{done} were removed (checkpoint #{seq} is signed)", done + 1
            )
        if seq != self.last_seq or self.last_hash != record.get("hash"):
            raise ChainBroken(f"the chain differs from checkpoint #{seq}", seq)

    def event(self, record: dict[str, Any], following: dict[str, Any] | None) -> None:
        self.events += 1
        seq = record.get("seq")
        if not isinstance(seq, int):
            raise ChainBroken("an event has no seq", None)
        if self.expected is None:  # an export from since_seq: trust where it starts
            self.expected = seq
            self.prev = record.get("prev_hash") if seq > 1 else GENESIS_HASH
        if seq > self.expected:
            raise ChainBroken(f"event #{self.expected} was removed", self.expected)
        if seq < self.expected:
            raise ChainBroken(f"event #{seq} was reordered or duplicated", seq)
        prev = str(self.prev)
        try:
            computed = event_hash(canonical_event(**_fields(record), prev_hash=prev))
        except (TypeError, ValueError, rfc8785.CanonicalizationError):
            raise ChainBroken(f"event #{seq} is malformed", seq) from None
        if record.get("prev_hash") != prev or record.get("hash") != computed:
            raise ChainBroken(_classify(record, following, prev), seq)
        self.prev = self.last_hash = computed
        self.last_seq, self.expected = seq, seq + 1
        if record.get("type") == PASSKEY_SIGNED:
            _check_passkey(record, seq, self.registered)
        elif record.get("type") == PASSKEY_REGISTERED and isinstance(record.get("data"), dict):
            data = record["data"]
            self.registered[str(data.get("credential_id"))] = str(data.get("public_key"))


def _check_passkey(record: dict[str, Any], seq: int, registered: dict[str, str]) -> None:
    """A passkey-signed vote: its assertion checked against the key, relying party and
    origin it carries, over the challenge rebuilt from the event's own request and the
    signed decision, arguments hash and nonce (docs/audit.md, "Passkey signatures").
    A key registered earlier in the chain must be the one it carries."""
    data = record.get("data")
    if not isinstance(data, dict):
        raise ChainBroken(f"event #{seq} has no passkey assertion", seq)
    known = registered.get(str(data.get("credential_id")))
    if known is not None and known != data.get("public_key"):
        raise ChainBroken(f"event #{seq} carries a key its passkey was not registered with", seq)
    try:
        verify_stored_assertion({**data, "request_id": record.get("request_id")})
    except PasskeyRefused:
        raise ChainBroken(
            f"event #{seq} has a passkey assertion that does not verify", seq
        ) from None


def verify(records: Iterable[dict[str, Any]], keys: KeyLookup | None) -> VerifyResult:
    """Check every hash, the sequence and each checkpoint, streaming with one event of
    lookahead; the first break found is named."""
    state = _Verifier(keys)
    try:
        for current, following in _with_lookahead(iter(records)):
            if current.get("kind") == "checkpoint":
                state.checkpoint(current)
            else:
                state.event(current, following)
    except ChainBroken as broken:
        return VerifyResult(
            False, state.events, state.checkpoints, state.last_seq, str(broken), broken.seq
        )
    return VerifyResult(True, state.events, state.checkpoints, state.last_seq)


def _with_lookahead(
    records: Iterator[dict[str, Any]],
) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each record with the next event after it (None at the end)."""
    buffered: list[dict[str, Any]] = []
    for record in records:
        buffered.append(record)
        if record.get("kind") == "event" and len(buffered) > 1:
            while len(buffered) > 1:
                yield buffered.pop(0), record
    while buffered:
        yield buffered.pop(0), None


def _fields(record: dict[str, Any]) -> dict[str, Any]:
    """An exported event's hashed fields (typed loosely: the verifier reads any JSON)."""
    return {field: record.get(field) for field in EVENT_FIELDS}
