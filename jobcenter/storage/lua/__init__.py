"""Loads the Lua transitions: each file gets the generated state constants and the shared
preludes prepended. Calls go out as EVALSHA; a server that answers NOSCRIPT (restarted,
flushed) gets the script loaded again and the call repeated."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from functools import cache
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from ..schema import lua_prelude

# Scripts that run in the context of one job (_job.lua, then _data.lua: results, inputs,
# run-time fan-out); the others see only _common.lua.
JOB_SCRIPTS = frozenset(
    {
        "submit",
        "start",
        "complete",
        "fail",
        "give_back",
        "gate_wait",
        "heartbeat",
        "expire",
        "publish_tasks",
        "queue_roots",
        "continue",
        "finalize",
        "cancel",
        "release",
        "repair",
        "resubmit",
        "revive",
        "delete",
        "compact",
        "restore",
    }
)
SHARD_SCRIPTS = frozenset(
    {
        "claim",
        "singleton",
        "schedule_add",
        "schedule_save",
        "schedule_remove",
        "notify_claim",
        "notify_attempt",
        "notify_done",
        "pool_set",
        "rate_set",
        "reconcile_slots",
        "shard_lease",
    }
)
ALL_SCRIPTS = JOB_SCRIPTS | SHARD_SCRIPTS
# Scripts besides the job scripts that take or give back pool and limit slots (_slots.lua).
SLOT_SCRIPTS = frozenset({"claim", "pool_set", "rate_set", "reconcile_slots"})


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script `name`."""
    if name not in ALL_SCRIPTS:
        raise KeyError(f"no Lua script named {name!r}")
    body = [_read("_common")]
    if name in JOB_SCRIPTS or name in SLOT_SCRIPTS:
        body.append(_read("_slots"))
    if name in JOB_SCRIPTS:
        body += [_read("_job"), _read("_data")]
    body.append(_read(name))
    return "\n".join([_constants_used(lua_prelude(), "\n".join(body)), *body])


_CONSTANT = re.compile(r"local (\w+) = ")
_WORD = re.compile(r"\w+")


def _constants_used(prelude: str, body: str) -> str:
    """The prelude without the constants that neither the body nor another kept constant
    names: Lua allows a script 200 locals, and the generated names alone take over 100."""
    lines = prelude.splitlines()
    uses = Counter(_WORD.findall(body + "\n" + prelude))
    dropped: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, line in enumerate(lines):
            match = _CONSTANT.match(line)
            if i in dropped or not match or uses[match.group(1)] > 1:
                continue
            dropped.add(i)  # named only where it is defined
            uses.subtract(_WORD.findall(line))
            changed = True
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped) + "\n"


@cache
def sha(name: str) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()


class Scripts:
    """Runs the scripts on one Redis client: `run` for one call, `batch` for a pipeline."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def load(self, name: str) -> None:
        self.redis.script_load(source(name))

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script `name` now and return its reply."""
        try:
            return self.redis.evalsha(sha(name), len(keys), *keys, *args)
        except NoScriptError:
            self.load(name)
            return self.redis.evalsha(sha(name), len(keys), *keys, *args)

    def batch(self) -> Batch:
        return Batch(self)


class Batch:
    """Script calls sent in one pipeline (one round trip), replies in call order."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.calls: list[tuple[str, list[str], list[Any]]] = []

    def add(self, name: str, keys: list[str], args: list[Any]) -> None:
        self.calls.append((name, keys, args))

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the calls; their replies in order. A call Redis refused (out of memory,
        read-only, ...) raises its error, or with `raise_on_error` off stands in its place,
        so the caller can keep what the other calls did."""
        if not self.calls:
            return []
        pipe = self.scripts.redis.pipeline(transaction=False)
        for name, keys, args in self.calls:
            pipe.execute_command("EVALSHA", sha(name), len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):  # that call did not run: load, run it again
                try:
                    replies[i] = reply = self.scripts.run(*self.calls[i])
                except RedisError as exc:
                    replies[i] = reply = exc
            if raise_on_error and isinstance(reply, Exception):
                raise reply
        return replies
