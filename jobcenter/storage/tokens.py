"""API tokens: who may do what over HTTP. A token is shown once, when it is made; Redis keeps
only its SHA-256, with its scope, its owner and a label. Also the key that signs the worker
protocol's attempt tokens.

Scopes, each allowing what the one before it does (but `work`, which only runs tasks):
read < submit < operate < admin; work. A token bound to an owner submits as that owner and
sees only that owner's jobs."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass
from enum import StrEnum

from jobcenter.errors import NotFound, SpecError
from jobcenter.model.spec import check_name

from .store import Store

TOKEN_PREFIX = "jct"  # a token is "jct_<id>_<secret>": its id names it in lists and revokes
TOKEN_ID_BYTES = 6  # 12 hex digits: enough to tell a namespace's tokens apart
TOKEN_SECRET_BYTES = 32  # 256 random bits: no search finds one, so a fast hash suffices
LABEL_MAX = 200  # characters of a token's --name
SIGNING_KEY_BYTES = 32


class Scope(StrEnum):
    READ = "read"  # read jobs, their history, results and events; list schedules, pools...
    SUBMIT = "submit"  # also submit jobs
    OPERATE = "operate"  # also cancel, retry, delete jobs; requeue dead letters; pause...
    WORK = "work"  # speak the worker protocol: claim, heartbeat, complete, fail
    ADMIN = "admin"  # everything: tokens, pools, rate limits, schedules


# What each scope allows, as the scopes it includes.
ALLOWS: dict[Scope, frozenset[Scope]] = {
    Scope.READ: frozenset({Scope.READ}),
    Scope.SUBMIT: frozenset({Scope.READ, Scope.SUBMIT}),
    Scope.OPERATE: frozenset({Scope.READ, Scope.SUBMIT, Scope.OPERATE}),
    Scope.WORK: frozenset({Scope.WORK}),
    Scope.ADMIN: frozenset(Scope),
}
# Scopes that act on every owner's work by nature: no owner binds them.
UNBOUND_SCOPES = (Scope.WORK, Scope.ADMIN)


@dataclass(frozen=True)
class TokenRecord:
    """What Redis keeps of a token (never the token)."""

    id: str
    scope: Scope
    owner: str | None
    name: str | None
    created_at: float  # epoch seconds, Redis time

    def allows(self, needed: Scope) -> bool:
        return needed in ALLOWS[self.scope]

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "scope": self.scope.value}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def parse_scope(value: str) -> Scope:
    try:
        return Scope(value)
    except ValueError:
        raise SpecError(
            f"scope {value!r} is not one of {', '.join(s.value for s in Scope)}"
        ) from None


def create(
    store: Store, scope: str, owner: str | None = None, name: str | None = None
) -> tuple[str, TokenRecord]:
    """A new token and its record; only the record and the token's hash are stored."""
    chosen = parse_scope(scope)
    if owner is not None:
        check_name(owner, "--owner")
        if chosen in UNBOUND_SCOPES:
            raise SpecError(
                f"a {chosen.value} token acts for every owner: --owner applies to read, "
                "submit and operate tokens"
            )
    if name is not None and (not name.strip() or len(name) > LABEL_MAX):
        raise SpecError(f"--name must be 1-{LABEL_MAX} characters")
    token_id = secrets.token_hex(TOKEN_ID_BYTES)
    token = f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(TOKEN_SECRET_BYTES)}"
    record = TokenRecord(token_id, chosen, owner, name, store.now_ms() / 1000)
    store.redis.hset(store.keys.api_tokens(), digest(token), json.dumps(record.to_dict()))
    return token, record


def _record(raw: bytes) -> TokenRecord:
    data = json.loads(raw)
    return TokenRecord(
        data["id"], Scope(data["scope"]), data["owner"], data["name"], data["created_at"]
    )


def find(store: Store, token: str) -> TokenRecord | None:
    """The record of `token`, or None for a token never made or revoked."""
    raw = store.redis.hget(store.keys.api_tokens(), digest(token))
    return None if raw is None else _record(raw)


def list_tokens(store: Store) -> list[TokenRecord]:
    """Every live token's record, oldest first."""
    records = [_record(raw) for raw in store.redis.hvals(store.keys.api_tokens())]
    return sorted(records, key=lambda r: (r.created_at, r.id))


def revoke(store: Store, token_id: str) -> TokenRecord:
    """Revoke the token with id `token_id` (as `token list` shows it); NotFound if none."""
    for field, raw in store.redis.hgetall(store.keys.api_tokens()).items():
        record = _record(raw)
        if record.id == token_id:
            store.redis.hdel(store.keys.api_tokens(), field)
            return record
    raise NotFound(f"no token {token_id!r} in namespace {store.settings.namespace!r}")


def signing_key(store: Store) -> bytes:
    """The namespace's key for attempt tokens: made by the first server that needs it, then
    shared by every server of the namespace (an executor may report to any of them)."""
    key = store.redis.get(store.keys.api_secret())
    if key is None:
        store.redis.set(store.keys.api_secret(), secrets.token_bytes(SIGNING_KEY_BYTES), nx=True)
        key = store.redis.get(store.keys.api_secret())
    return bytes(key)
