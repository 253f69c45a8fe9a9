"""Pools and limits in Redis: set, list and delete pools and queue rate limits, and reconcile
the slot counters with the leases (recovery rule 9).

A pool's slot count is stored in every shard; each shard enforces its share of it (claim.lua
splits it: the shares add up to the count), so the pool is never exceeded, whichever shards
its tasks land in, with no script touching two shards. A job's max_running is exact as it is
(a job is in one shard); a concurrency key's limit is split like a pool.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from jobcenter.errors import NotFound, SpecError, WrongState
from jobcenter.model.durations import parse_seconds
from jobcenter.model.spec import MAX_RUNNING_LIMIT, check_name

from .keyspace import schema
from .keyspace.schema import LimitField, LimitKind
from .server.replies import text
from .store import Store

WRONG_STATE = schema.code("WRONG_STATE")
SCAN_PAGE = 1_000  # hash fields per HSCAN page
RATE_RE = re.compile(r"(\d+)\s*/\s*(\S+)")  # <starts>/<period>
RATE_PERIOD_MAX_MS = 86_400_000  # a day: longer windows are a typo for a quota


@dataclass(frozen=True)
class PoolView:
    name: str
    total: int | None  # None: tasks name the pool but it was never set (they wait)
    used: int  # slots held by reserved and running tasks, all shards
    waiting: int  # tasks parked until a slot frees, all shards


def _check_pool(name: str) -> str:
    return check_name(name, "a pool name")


def set_pool(store: Store, name: str, slots: int) -> None:
    """Set pool `name` to `slots` slots (created if new). More slots take effect at the
    next claim; fewer let the running tasks finish, and no new one starts until under."""
    _check_pool(name)
    if isinstance(slots, bool) or not isinstance(slots, int) or not 0 <= slots <= MAX_RUNNING_LIMIT:
        raise SpecError(
            f"a pool's slots must be a whole number from 0 to {MAX_RUNNING_LIMIT}, got {slots!r}"
        )
    _run_pool_set(store, name, str(slots))


def delete_pool(store: Store, name: str) -> None:
    """Delete pool `name`; refused (WrongState) while its slots are in use or tasks wait."""
    _check_pool(name)
    _run_pool_set(store, name, "")


def _run_pool_set(store: Store, name: str, value: str) -> None:
    keys = store.keys
    if value == "":  # every shard checked before any is changed
        pool = pools(store, name)
        if pool and (pool[0].used or pool[0].waiting):
            raise WrongState(
                f"pool {name!r} has {pool[0].used} slot(s) in use and {pool[0].waiting} "
                "task(s) waiting: it can be deleted once they have run"
            )
        if not pool or pool[0].total is None:
            raise NotFound(f"no pool {name!r} is set in namespace {store.settings.namespace!r}")
    for shard in range(keys.shards):
        limits, slots, _, freed, freed_wake = keys.limit_keys(shard)
        script_keys = [limits, slots, freed, freed_wake]
        (code,) = store.scripts.run("pool_set", script_keys, [name, value])
        if code == WRONG_STATE:
            raise WrongState(f"pool {name!r} is in use: its tasks started meanwhile")


def pools(store: Store, only: str | None = None) -> list[PoolView]:
    """Every pool set or named by a task, with its slots used and tasks waiting."""
    total: dict[str, int] = {}
    used: dict[str, int] = defaultdict(int)
    waiting: dict[str, int] = defaultdict(int)
    pattern = "*" if only is None else only
    for shard in range(store.keys.shards):
        limits, slots = store.keys.limits(shard), store.keys.slots(shard)
        for field, value in _scan(store, limits, f"{LimitField.POOL_TOTAL}{pattern}"):
            total[field[len(LimitField.POOL_TOTAL) :]] = int(value)
        for field, value in _scan(store, limits, f"{LimitField.PARKED}{LimitKind.POOL}{pattern}"):
            waiting[field[len(LimitField.PARKED) + len(LimitKind.POOL) :]] += int(value)
        for field, value in _scan(store, slots, f"{LimitKind.POOL}{pattern}"):
            if "|" not in field:  # "<job>|<index>" fields are reservations, not counters
                used[field[len(LimitKind.POOL) :]] += int(value)
    names = sorted(total.keys() | used.keys() | waiting.keys())
    return [PoolView(n, total.get(n), used.get(n, 0), waiting.get(n, 0)) for n in names]


def _scan(store: Store, key: str, match: str) -> list[tuple[str, str]]:
    return [
        (text(f) or "", text(v) or "")
        for f, v in store.redis.hscan_iter(key, match=match, count=SCAN_PAGE)
    ]


@dataclass(frozen=True)
class RateView:
    target: str  # queue:NAME or pool:NAME
    starts: int  # at most this many of its tasks start...
    period: float  # ...per this many seconds (a window opens at the first start after one ends)


def parse_rate(text_value: str) -> tuple[int, int]:
    """ "100/1s" (or 5/500ms, 60/1m, 1000/1h, 100/s) -> (starts, period ms). The period is a
    duration (model.durations) from 1 ms to a day; a bare unit means one of it."""
    match = RATE_RE.fullmatch(text_value.strip())
    if match is None:
        raise SpecError(
            f"a rate must be <starts>/<period> like 100/1s, 5/500ms, 60/1m, got {text_value!r}"
        )
    starts, period = int(match[1]), match[2]
    if not 1 <= starts <= MAX_RUNNING_LIMIT:
        raise SpecError(f"a rate needs 1-{MAX_RUNNING_LIMIT} starts per period, got {text_value!r}")
    seconds = parse_seconds(
        f"1{period}" if period.isalpha() else period,
        f"the period of rate {text_value.strip()!r}",
        low=0.001,
        high=RATE_PERIOD_MAX_MS / 1000,
    )
    return starts, round(seconds * 1000)


def _rate_field(target: str) -> str:
    """queue:NAME -> NAME; pool:NAME -> p:NAME (its limit id): what follows LimitField.RATE.
    A queue name holds no ':', so the two never meet."""
    kind, _, name = target.partition(":")
    if kind == "queue":
        return check_name(name, "a queue name")
    if kind == "pool":
        return f"{LimitKind.POOL}{check_name(name, 'a pool name')}"
    raise SpecError(f"a rate limit applies to queue:NAME or pool:NAME, got {target!r}")


def set_rate(store: Store, target: str, rate: str) -> RateView:
    """Limit queue:NAME or pool:NAME to `rate` starts ("100/1s"), in every shard (each its
    share)."""
    field = _rate_field(target)
    starts, period_ms = parse_rate(rate)
    _run_rate_set(store, field, f"{starts}/{period_ms}")
    return RateView(target, starts, period_ms / 1000)


def delete_rate(store: Store, target: str) -> None:
    """Remove `target`'s rate limit; NotFound when it has none."""
    if target not in {rate.target for rate in rates(store)}:
        _rate_field(target)  # a malformed target is a spec error first
        raise NotFound(f"no rate limit on {target} in namespace {store.settings.namespace!r}")
    _run_rate_set(store, _rate_field(target), "")


def _run_rate_set(store: Store, field: str, value: str) -> None:
    for shard in range(store.keys.shards):
        limits, _, _, freed, freed_wake = store.keys.limit_keys(shard)
        store.scripts.run("rate_set", [limits, freed, freed_wake], [field, value])


def rates(store: Store) -> list[RateView]:
    """Every rate limit (as set: each shard enforces its share)."""
    found: dict[str, RateView] = {}
    for field, value in _scan(store, store.keys.limits(0), f"{LimitField.RATE}*"):
        starts, period_ms = value.split("/")
        name = field[len(LimitField.RATE) :]
        target = f"pool:{name[2:]}" if name.startswith(LimitKind.POOL) else f"queue:{name}"
        found[target] = RateView(target, int(starts), int(period_ms) / 1000)
    return [found[t] for t in sorted(found)]


@dataclass(frozen=True)
class SlotCheck:
    leaked: int  # reservations holding slots without a lease (given back when correcting)
    corrected: int  # limits whose used count disagreed with the reservations


def reconcile(store: Store, *, correct: bool = True, shard: int | None = None) -> SlotCheck:
    """Check the slot counters of every shard (or of `shard`) against the leases
    (reconcile_slots.lua); with `correct`, give back what a reservation without a lease
    holds and fix the counts."""
    leaked = corrected = 0
    for s in range(store.keys.shards) if shard is None else [shard]:
        limits, slots, _, freed, freed_wake = store.keys.limit_keys(s)
        keys = [limits, slots, freed, freed_wake, store.keys.leases(s)]
        _, n_leaked, n_corrected = store.scripts.run(
            "reconcile_slots", keys, ["1" if correct else "0"]
        )
        leaked += int(n_leaked)
        corrected += int(n_corrected)
    return SlotCheck(leaked, corrected)
