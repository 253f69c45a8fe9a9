"""codec: msgpack round trips, and every way a value is refused with a named reason."""

from __future__ import annotations

import datetime

import msgpack
import pytest

from jobcenter.errors import SpecError
from jobcenter.model import codec


def nested(depth: int) -> list[object]:
    """A list nested `depth` containers deep (the outer list counts as 1)."""
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**64 - 1,
        -(2**63),
        1.5,
        "héllo",
        b"\x00\xff",
        [],
        [1, "a", None, [2.5, b"x"]],
        {"a": 1, "b": {"c": [1, 2]}},
        {1: "int key", None: "none key"},
    ],
)
def test_plain_values_round_trip(value: object) -> None:
    assert codec.unpack(codec.pack(value)) == value


def test_tuples_come_back_as_lists() -> None:
    assert codec.unpack(codec.pack((1, (2, 3)))) == [1, [2, 3]]


def test_bytes_and_str_stay_distinct() -> None:
    assert codec.unpack(codec.pack([b"abc", "abc"])) == [b"abc", "abc"]


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        ({1, 2}, "set"),
        (datetime.date(2026, 11, 22), "datetime.date"),
        (object(), "object"),
        ([1, frozenset()], "frozenset"),
        ({"k": complex(1, 2)}, "complex"),
    ],
)
def test_unsupported_types_name_the_value_and_type(value: object, type_name: str) -> None:
    with pytest.raises(SpecError, match=rf"^task 'x': args cannot be encoded: .*{type_name}"):
        codec.pack(value, what="task 'x': args")


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**30])
def test_ints_outside_msgpack_range_are_refused(number: int) -> None:
    with pytest.raises(SpecError, match=r"^result cannot be encoded: an integer is outside"):
        codec.pack([number], what="result")


def test_nesting_up_to_max_depth_is_accepted() -> None:
    value = nested(codec.MAX_DEPTH)
    assert codec.unpack(codec.pack(value)) == value


def test_nesting_past_max_depth_is_refused() -> None:
    with pytest.raises(SpecError, match=r"^value cannot be encoded: nested deeper than 32 levels"):
        codec.pack(nested(codec.MAX_DEPTH + 1))


def test_deep_nesting_inside_a_dict_is_refused() -> None:
    with pytest.raises(SpecError, match="nested deeper than 32"):
        codec.pack({"a": nested(codec.MAX_DEPTH)})


def test_a_smaller_max_depth_can_be_asked_for() -> None:
    codec.pack(nested(3), max_depth=3)
    with pytest.raises(SpecError, match="nested deeper than 3 levels"):
        codec.pack(nested(4), max_depth=3)


def test_self_referencing_list_is_refused_not_a_crash() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(SpecError, match="nested deeper than"):
        codec.pack(loop)


def test_container_map_keys_are_refused() -> None:
    with pytest.raises(SpecError, match="map key of type tuple"):
        codec.pack({(1, 2): "x"})


def test_spec_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        codec.pack({1, 2})


def test_unpack_refuses_data_over_max_bytes() -> None:
    data = codec.pack("x" * 100)
    with pytest.raises(SpecError, match=rf"cannot decode {len(data)} bytes .* limit is 10"):
        codec.unpack(data, max_bytes=10)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # empty
        b"\x93\x01",  # array of 3 with one item: truncated
        b"\x01\x02",  # two values where one was expected
        b"\xc1",  # the one byte msgpack never uses
        b"\xa2\xff\xfe",  # str that is not UTF-8
        b"\x81\x91\x01\x02",  # map with a list as key
        b"\x91" * 5000 + b"\x01",  # nested past the unpacker's stack
    ],
)
def test_malformed_data_raises_spec_error(data: bytes) -> None:
    with pytest.raises(SpecError, match="^cannot decode msgpack"):
        codec.unpack(data)


def test_ext_types_are_refused() -> None:
    data = msgpack.packb(msgpack.ExtType(5, b"planted"))
    with pytest.raises(SpecError, match="ext type 5"):
        codec.unpack(data)
