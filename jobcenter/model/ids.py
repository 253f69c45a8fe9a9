"""Time-sortable ids (ULID) and handler ids."""

from __future__ import annotations

import os
import time
import uuid

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid() -> str:
    """A 26-character ULID: 48 bits of milliseconds then 80 random bits, sortable by time."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def handler_id() -> str:
    """A fresh worker handler id (uuid4), taken at every worker start."""
    return uuid.uuid4().hex
