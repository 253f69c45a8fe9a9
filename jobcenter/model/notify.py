"""A job's `notify:` section: which final states (and events: late, a task failed) are told,
and to whom (a webhook, the job-finished hooks registered on the workers). Pure: parsing and
the names shared with storage and runtime; delivery itself is jobcenter/runtime/notifier.py."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from jobcenter.errors import SpecError

from .states import JobState

# A URL is stored with the job and sent in a request line; longer ones are a mistake.
MAX_URL_LENGTH = 2_000
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
NOTIFY_KEYS = frozenset({"on", "webhook", "hook"})
# Events told while the job runs, besides its end: past its sla, a task failed for good.
LATE = "late"
TASK_FAILED = "task_failed"
NOTICE_EVENTS = (LATE, TASK_FAILED)
TASK_FAILED_NOTICES_MAX = 10  # task_failed notices per job; the final notice counts the rest


class NoticeKind(StrEnum):
    """What a notification tells of (its body's `kind`)."""

    FINISHED = "finished"  # the job ended in one of `on`'s final states
    LATE = LATE  # the job is still unfinished past its sla
    TASK_FAILED = TASK_FAILED  # one of its tasks failed for good (dead-lettered)


def parse_delivery(name: str) -> tuple[Channel, NoticeKind, int | None]:
    """A delivery's name, "<channel>" for the job's end, "<channel>:late", or
    "<channel>:task_failed:<task index>": its channel, kind and task index."""
    channel, _, rest = name.partition(":")
    kind, _, index = rest.partition(":")
    return Channel(channel), NoticeKind(kind or NoticeKind.FINISHED), int(index) if index else None


class Channel(StrEnum):
    """Where a notification goes; each has its own delivery (attempts, retries, outcome)."""

    WEBHOOK = "webhook"  # an HTTP POST of the job's summary to the spec's URL
    HOOK = "hook"  # the job-finished hooks registered on the worker that delivers it


class DeliveryState(StrEnum):
    """A delivery's progress, as `status` shows it."""

    PENDING = "pending"  # recorded by the finalize, not tried yet
    DELIVERING = "delivering"  # an attempt is under way (leased: redelivered if it dies)
    RETRYING = "retrying"  # the last attempt failed; the next one is due later
    DELIVERED = "delivered"
    FAILED = "failed"  # every attempt failed: given up


@dataclass(frozen=True)
class Notify:
    """Tell `webhook` and/or the workers' hooks when the job ends in one of `on`, and of the
    events `on` lists (NOTICE_EVENTS)."""

    on: tuple[str, ...]
    webhook: str | None = None
    hook: bool = False

    @property
    def channels(self) -> tuple[Channel, ...]:
        out = [Channel.WEBHOOK] if self.webhook else []
        return (*out, Channel.HOOK) if self.hook else tuple(out)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"on": list(self.on)}
        if self.webhook:
            out["webhook"] = self.webhook
        if self.hook:
            out["hook"] = True
        return out


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60


def _bad(problem: str) -> SpecError:
    return SpecError(f"job: 'notify': {problem}")


def parse_notify(raw: object) -> Notify:
    """Validate a spec's `notify:` mapping: `on` a non-empty list of final job states and
    events (NOTICE_EVENTS),
    `webhook` an http(s) URL, `hook` a bool; at least one of webhook and hook."""
    if not isinstance(raw, Mapping):
        raise _bad(f"must be a mapping (on, webhook, hook), got {type(raw).__name__}")
    unknown = [key for key in raw if key not in NOTIFY_KEYS]
    if unknown:
        raise _bad(f"unknown key {_SHORT.repr(unknown[0])} (known: on, webhook, hook)")
    states = raw.get("on")
    if isinstance(states, str):
        states = [states]
    known = ", ".join((*FINAL_STATES, *NOTICE_EVENTS))
    if not isinstance(states, list | tuple) or not states:
        raise _bad(f"'on' must list the final job states and events to be told of ({known})")
    for state in states:
        if state not in FINAL_STATES and state not in NOTICE_EVENTS:
            raise _bad(
                f"'on' has {_SHORT.repr(state)}, not a final job state nor an event ({known})"
            )
    webhook = raw.get("webhook")
    if webhook is not None:
        webhook = check_webhook_url(webhook)
    hook = raw.get("hook", False)
    if not isinstance(hook, bool):
        raise _bad(f"'hook' must be true or false, got {_SHORT.repr(hook)}")
    if webhook is None and not hook:
        raise _bad("says whom to tell: give a 'webhook' URL, or 'hook: true', or both")
    return Notify(tuple(dict.fromkeys(states)), webhook, hook)


def check_webhook_url(url: object) -> str:
    """An absolute http or https URL with a host, printable, at most MAX_URL_LENGTH long."""
    rule = f"an http:// or https:// URL with a host, at most {MAX_URL_LENGTH} characters"
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH or not url.isprintable():
        raise _bad(f"'webhook' must be {rule}, got {_SHORT.repr(url)}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a port out of range
    except ValueError:
        raise _bad(f"'webhook' must be {rule}, got {_SHORT.repr(url)}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in url:
        raise _bad(f"'webhook' must be {rule}, got {_SHORT.repr(url)}")
    return url
