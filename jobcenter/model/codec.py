"""msgpack with size and depth limits: the only (de)serialisation path.

Never pickle: anyone who can write to Redis must not be able to run code on a worker by
planting a payload. msgpack carries plain data only (None, bool, int, float, str, bytes,
lists and maps), so a payload can be wrong but never executable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack

from jobcenter.errors import SpecError

# Containers nested deeper than this are refused: real arguments are shallow, and a bound
# keeps a hostile or self-referencing value from exhausting the C stack of the packer.
MAX_DEPTH = 32

# Default ceiling for one unpacked value: far above any task payload (512 KiB) or result a
# worker should write to Redis, low enough that a corrupt length cannot ask for gigabytes.
MAX_UNPACK_BYTES = 64 * 1024 * 1024


class TooLarge(SpecError):
    """A value packs to more than the max_bytes it was given."""


_CONTAINERS = (list, tuple, dict)
# Map keys must come back hashable: a list key would unpack as an unhashable list.
_KEY_TYPES = (str, int, float, bytes, bool, type(None))


def _check(obj: Any, what: str, max_depth: int, max_bytes: int | None) -> None:
    """Refuse containers nested deeper than max_depth, map keys that cannot round-trip, and
    (given max_bytes) a value that cannot pack into max_bytes. The size is bounded while
    walking, before packing: a YAML alias repeated inside itself ("billion laughs") is a
    few lines of text that expand to gigabytes. Every item packs to at least one byte, a
    str or bytes to at least its length, so the count is a lower bound of the packed size."""
    size = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise SpecError(f"{what} cannot be encoded: nested deeper than {max_depth} levels")
        values: Iterable[Any] = node
        if isinstance(node, dict):
            for key in node:
                if not isinstance(key, _KEY_TYPES):
                    raise SpecError(
                        f"{what} cannot be encoded: map key of type {type(key).__name__} "
                        "(keys must be str, int, float, bytes, bool or None)"
                    )
                size += len(key) if isinstance(key, str | bytes) else 1
            values = node.values()
        size += 1
        for value in values:
            if isinstance(value, _CONTAINERS):
                stack.append((value, depth + 1))
            else:
                size += len(value) if isinstance(value, str | bytes) else 1
        if max_bytes is not None and size > max_bytes:
            raise _too_large(what, max_bytes)


def pack(
    obj: object, *, what: str = "value", max_depth: int = MAX_DEPTH, max_bytes: int | None = None
) -> bytes:
    """Encode plain data as msgpack; anything else raises SpecError naming `what`.

    Supports None, bool, int (64-bit range), float, str, bytes, list, tuple and dict;
    tuples come back as lists. A value that will later be packed inside other containers
    can be checked with a smaller max_depth, so the outer pack cannot fail. With max_bytes,
    a value packing to more raises TooLarge (before packing where _check can tell).
    """
    if max_bytes is not None:
        if isinstance(obj, str | bytes) and len(obj) > max_bytes:
            raise _too_large(what, max_bytes)
        if isinstance(obj, _CONTAINERS):
            _check(obj, what, max_depth, max_bytes)
    elif isinstance(obj, dict):
        _check(obj, what, max_depth, None)
    elif isinstance(obj, (list, tuple)):
        for item in obj:  # a flat list, the usual args, needs no deeper walk
            if isinstance(item, _CONTAINERS):
                _check(obj, what, max_depth, None)
                break
    try:
        # A fresh Packer per call: a shared one is not thread-safe, and packb's keyword
        # plumbing doubles the cost of packing a small list.
        packed: bytes = msgpack.Packer(use_bin_type=True).pack(obj)
    except TypeError as exc:  # msgpack's "can not serialize 'set' object"
        raise SpecError(f"{what} cannot be encoded: {exc}") from None
    except OverflowError:
        raise SpecError(
            f"{what} cannot be encoded: an integer is outside the 64-bit range msgpack supports"
        ) from None
    except ValueError as exc:  # e.g. a str or bytes longer than 2**32 - 1
        raise SpecError(f"{what} cannot be encoded: {exc}") from None
    if max_bytes is not None and len(packed) > max_bytes:
        raise _too_large(what, max_bytes)
    return packed


def _too_large(what: str, max_bytes: int) -> TooLarge:
    return TooLarge(f"{what} cannot be encoded: more than {max_bytes} bytes packed (the limit)")


def pack_valid(obj: object) -> bytes:
    """Encode data already checked by `pack` or the spec parser (or just unpacked by
    `unpack`): the same bytes, without walking it again. The hot path of publishing a DAG."""
    packed: bytes = msgpack.Packer(use_bin_type=True).pack(obj)
    return packed


def _refuse_ext(code: int, data: bytes) -> object:
    # We never write ext types, so one in Redis is corruption or a planted payload.
    raise SpecError(f"cannot decode msgpack ext type {code}: only plain data is accepted")


def unpack(data: bytes, *, max_bytes: int = MAX_UNPACK_BYTES) -> object:
    """Decode msgpack written by `pack`; oversized or malformed data raises SpecError."""
    if len(data) > max_bytes:
        raise SpecError(f"cannot decode {len(data)} bytes of msgpack; the limit is {max_bytes}")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_refuse_ext)
    except SpecError:
        raise
    except msgpack.StackError:
        raise SpecError("cannot decode msgpack: nested too deeply") from None
    except msgpack.FormatError:
        raise SpecError("cannot decode msgpack: malformed data") from None
    except (ValueError, TypeError) as exc:  # extra or truncated data, bad UTF-8, list as key
        raise SpecError(f"cannot decode msgpack: {exc}") from None
