"""When a SQLite create may trust its principal's "the org has no channel" and write no
notification plan (docs/decisions/0034-create-cuts.md).

A create writes a "created" plan row only where its org has a channel
(``notifications.planning.can_notify``), which on SQLite cost a statement of its own on
every create, although most orgs have no channel. The principal read for the call says
whether the org had one (``Principal.org_has_channels``), but that read comes before the
write: a channel committed in between, by this process or by any other, must still get
its plan. So the principal also carries the ``epoch`` below as it was before its read,
and the plan is skipped only while the epoch is unchanged and no channel is being
written. The epoch moves on:

- when a write transaction of this process begins and finds that another connection
  (a CLI, ``signoff worker``, another replica) committed since the last one
  (``PRAGMA data_version`` of the writer connection, ``group_commit``); a transaction
  holds the write lock from its ``BEGIN IMMEDIATE``, so nothing commits during it;
- when this process writes a channel (``channel_written``), and again once that
  transaction commits or rolls back (``GroupCommit._commit``), before the next writer's
  block: a principal read between the write and its commit is not trusted either.

Either move only costs the creates in flight one plan statement, as before.
"""

from __future__ import annotations


class _Presence:
    """The process's one epoch (``_PRESENCE``)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.writing = False


_PRESENCE = _Presence()


def epoch() -> int:
    """The epoch now; -1 while a channel is written and not yet committed (never equal)."""
    return -1 if _PRESENCE.writing else _PRESENCE.epoch


def moved() -> None:
    """Something a principal read earlier may not have seen was committed."""
    _PRESENCE.epoch += 1


def channel_written() -> None:
    """This process's write transaction added or changed a channel."""
    _PRESENCE.writing = True
    moved()


def transaction_ended() -> None:
    """A write transaction of this process committed or rolled back."""
    if _PRESENCE.writing:
        _PRESENCE.writing = False
        moved()


def unchanged_since(seen: int) -> bool:
    """Whether a principal read at epoch ``seen`` still says what the database does
    about the org's channels."""
    return seen >= 0 and seen == _PRESENCE.epoch and not _PRESENCE.writing
