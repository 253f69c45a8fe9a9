"""The one duration parser (jobcenter.model.durations): every form it takes, and the one
message form every bad value gets, wherever it was read (the settings and gates here; spec
keys in test_spec.py and test_yaml_booleans.py; CLI options in test_cli_durations.py)."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta

import pytest

from jobcenter.config import BOUNDS, Settings, env_name
from jobcenter.errors import SpecError
from jobcenter.model.durations import MAX_SECONDS, format_seconds, parse_seconds
from jobcenter.runtime.registry import gate, lookup_gate

FORMS = "(seconds, or 90s, 15m, 3d, PT1H)"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        (0, 0.0),
        ("90", 90.0),
        ("1.5", 1.5),
        (".5", 0.5),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("3d", 259_200.0),
        ("2w", 1_209_600.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("1h30m", 5400.0),
        ("1d12h", 129_600.0),
        ("1w2d3h4m5s6ms", 788_645.006),
        ("1m5ms", 60.005),
        ("15M", 900.0),
        (" 10m ", 600.0),
        ("PT1H", 3600.0),
        ("PT1H30M", 5400.0),
        ("P1DT12H", 129_600.0),
        ("P2W", 1_209_600.0),
        ("PT0.5S", 0.5),
        ("PT0,5M", 30.0),
        ("pt2m", 120.0),
        (timedelta(minutes=5), 300.0),
    ],
)
def test_every_form_gives_its_seconds(value: object, seconds: float) -> None:
    assert parse_seconds(value, "'timeout'") == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize(
    "value",
    [
        "", "  ", "abc", "10 min", "1h 30m", "30m1h", "1h1h", "-5s", "-5", "+5", "1e3", "5x",
        "P", "PT", "P1DT", "PT30", "-PT30S", "P1H", "s", "ms", "inf", "nan", True, False,
        None, [1], {"s": 1},
    ],
)  # fmt: skip
def test_a_value_in_no_form_is_refused_listing_the_forms(value: object) -> None:
    with pytest.raises(SpecError) as err:
        parse_seconds(value, "'timeout'")
    assert str(err.value) == f"'timeout' must be a duration {FORMS}, got {value!r}"


@pytest.mark.parametrize("value", ["P1M", "P1Y", "P1Y2M3D", "p3m"])
def test_months_and_years_are_refused_as_having_no_fixed_length(value: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_seconds(value, "--every")
    assert str(err.value) == (
        "--every must be a duration of fixed length (give days or weeks: months and years "
        f"have none), got {value!r}"
    )


@pytest.mark.parametrize(
    ("value", "low_open", "bound"),
    [
        (-1, False, ">= 0"),
        (0, True, "> 0"),
        ("0s", True, "> 0"),
        ("PT0S", True, "> 0"),
        (MAX_SECONDS + 1, False, ">= 0"),
        ("367d", False, ">= 0"),
        ("53w", False, ">= 0"),
        (float("inf"), False, ">= 0"),
        (float("nan"), False, ">= 0"),
    ],
)
def test_a_value_out_of_bounds_is_refused_naming_the_bounds(
    value: object, low_open: bool, bound: str
) -> None:
    with pytest.raises(SpecError) as err:
        parse_seconds(value, "JOBCENTER_LEASE_SECONDS", low_open=low_open)
    assert str(err.value) == (
        f"JOBCENTER_LEASE_SECONDS must be a duration {bound} and at most 366d, got {value!r}"
    )


def test_a_huge_number_is_refused_in_a_short_message() -> None:
    with pytest.raises(SpecError) as err:
        parse_seconds(10**400, "'timeout'")  # float() of it would raise OverflowError
    assert str(err.value).startswith("'timeout' must be a duration >= 0 and at most 366d, got 10")
    assert len(str(err.value)) < 150


def test_the_bounds_are_inclusive_unless_open() -> None:
    assert parse_seconds("366d", "x") == MAX_SECONDS
    assert parse_seconds(0, "x") == 0.0
    assert parse_seconds("1s", "x", low=1, high=60) == 1.0
    with pytest.raises(SpecError, match=r"^x must be a duration > 1s and at most 1m, got '1s'$"):
        parse_seconds("1s", "x", low=1, low_open=True, high=60)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0"), (0.001, "1ms"), (1, "1s"), (90, "1m30s"), (129_600, "1d12h"), (MAX_SECONDS, "366d")],
)
def test_bounds_are_shown_as_people_write_them(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text
    assert parse_seconds(text, "x") == seconds


# -- where durations are read besides specs: settings and gates ------------------------------

# Every setting that is a duration (a `*_seconds` field), and its environment variable.
DURATION_SETTINGS = [
    (f.name, env_name(f.name)) for f in fields(Settings) if f.name.endswith("_seconds")
]


@pytest.mark.parametrize(("field", "variable"), DURATION_SETTINGS)
@pytest.mark.parametrize(("raw", "seconds"), [("45", 45.0), ("1m30s", 90.0), ("PT2H", 7200.0)])
def test_every_duration_setting_takes_every_form(
    monkeypatch: pytest.MonkeyPatch, field: str, variable: str, raw: str, seconds: float
) -> None:
    monkeypatch.setenv(variable, raw)

    assert getattr(Settings.from_env(), field) == seconds


@pytest.mark.parametrize(("field", "variable"), DURATION_SETTINGS)
@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("soon", f"must be a duration {FORMS}, got 'soon'"),
        ("0s", "must be a duration > 0 and at most 366d, got '0s'"),
        ("P1Y", "must be a duration of fixed length (give days or weeks: months and years "
                "have none), got 'P1Y'"),
    ],
)  # fmt: skip
def test_a_duration_setting_in_no_form_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, field: str, variable: str, raw: str, problem: str
) -> None:
    monkeypatch.setenv(variable, raw)

    with pytest.raises(ValueError) as err:
        Settings.from_env()
    # a setting of its own upper bound (the archive's retention) names it
    problem = problem.replace("366d", format_seconds(BOUNDS[field].high))
    assert str(err.value) == f"{variable} {problem}"


def test_a_gate_takes_its_backoff_and_give_up_after_as_durations() -> None:
    gate("durations-gate", backoff="30s", give_up_after="PT1H")(lambda: True)

    registered = lookup_gate("durations-gate")
    assert registered is not None
    assert (registered.backoff, registered.give_up_after) == (30.0, 3600.0)
    with pytest.raises(SpecError) as err:
        gate("durations-gate", backoff="soon")
    assert (
        str(err.value) == f"gate 'durations-gate': backoff must be a duration {FORMS}, got 'soon'"
    )
