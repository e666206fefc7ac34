"""RFC 8785 (JSON Canonicalization Scheme) bytes of a value, quickly where that is safe.

The ``rfc8785`` package writes every string, key and number from Python code: about
25 µs for an audit event, which the sealer and the worker's re-check each pay once per
event (docs/performance.md, "The audit chain"). ``orjson`` (``OPT_SORT_KEYS``) writes the
same bytes in about 1 µs for the values the chain holds, under conditions checked here
first:

- every object key is a ``str`` of ASCII only: RFC 8785 orders keys by their UTF-16 code
  units, orjson by their UTF-8 bytes; the two orders are code point order as long as no
  key holds a character above U+FFFF, and ASCII keys hold none;
- every string escapes the same: both escape ``"``, ``\\`` and U+0000-U+001F
  (``\\b \\t \\n \\f \\r`` short, the rest as lowercase ``\\u00xx``) and write every
  other character as UTF-8, for every code point (tests/audit/test_canonical.py checks
  them all); a lone surrogate makes orjson refuse, and is left to ``rfc8785``, which
  refuses it too;
- every number is an ``int`` within ±(2^53 - 1), written in decimal by both; floats
  (whose ECMAScript form is not orjson's) and larger integers (which RFC 8785 refuses)
  are left to ``rfc8785``;
- only exact ``dict``, ``list``, ``str``, ``int``, ``bool`` and ``None``: anything else
  (a tuple, a subclass, a UUID, which orjson would write) is left to ``rfc8785``, which
  accepts or refuses it.

Whatever fails a condition is canonicalised by ``rfc8785`` itself, so every value gives
exactly the bytes, or the error, that ``rfc8785.dumps`` gives (a property test holds the
two together on generated values).
"""

from __future__ import annotations

import os
from typing import Any

import orjson
import rfc8785

# RFC 8785's safe integers (those an IEEE 754 double holds exactly).
_INT_LIMIT = 2**53 - 1
# The measurement switch (docs/performance.md, *Hand-written replacements*): with it set
# in the environment when this module is imported, every value goes through ``rfc8785``.
STOCK_SWITCH = "SIGNOFF_STOCK_CANONICAL"
_FAST = os.environ.get(STOCK_SWITCH) != "1"


def dumps(value: Any) -> bytes:
    """``rfc8785.dumps(value)``, byte for byte, error for error."""
    if _FAST and _plain(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate, or nesting too deep for orjson
            pass
    return rfc8785.dumps(value)


def _plain(value: Any) -> bool:
    """Whether ``value`` is made only of what the C encoder writes as RFC 8785 does (the
    scalars of an object or array checked inline: this runs once per event)."""
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str or not key.isascii():
                return False
        items = value.values()
    elif kind is list:
        items = value
    else:
        return _plain_scalar(value)
    for item in items:
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is int:
            if -_INT_LIMIT <= item <= _INT_LIMIT:
                continue
            return False
        if not _plain(item):
            return False
    return True


def _plain_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return bool(-_INT_LIMIT <= value <= _INT_LIMIT)
    return kind is str or kind is bool or value is None
