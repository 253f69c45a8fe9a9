"""What a recovery pass found and repaired: its report, kept by rq as the round's result and
read back by the dashboard."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RecoveryReport:
    ran: bool = True
    skipped: str = ""  # why the pass did not run
    jobs_checked: int = 0
    leases: dict[str, int] = field(default_factory=dict)  # expire.lua outcomes
    leader_steps: int = 0  # due leader messages (stalled split/finalize/...) run again
    requeued: int = 0  # queued tasks whose queue entry was lost
    released: int = 0  # waiting tasks whose parents had all succeeded
    node_retried: int = 0  # tasks pinned to a node with no live worker, queued again
    node_failed: int = 0  # ... and those whose attempts were exhausted: failed
    no_worker: int = 0  # tasks whose task name no live worker had registered for too long
    leased: int = 0  # running tasks that had lost their lease
    resubmitted: dict[str, int] = field(default_factory=dict)  # leader messages re-added
    finalized: int = 0
    abandoned: int = 0  # stalled scheduled jobs marked failed instead of resubmitted
    trimmed: int = 0  # expired jobs dropped from the list indexes (not a repair)
    slots_leaked: int = 0  # reservations that held pool/limit slots without a lease
    slots_corrected: int = 0  # limits whose count of used slots was off
    lost: int = 0  # unfinished jobs whose keys Redis lost (evicted): settled, failed
    archived: int = 0  # finished jobs whose archive step was interrupted or failed: archived
    archive_pruned: int = 0  # archived jobs past the archive's retention, deleted (not a repair)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def repairs(self) -> int:
        return (
            sum(v for k, v in self.leases.items() if k != "live")
            + self.leader_steps
            + self.requeued
            + self.released
            + self.node_retried
            + self.node_failed
            + self.no_worker
            + self.leased
            + sum(self.resubmitted.values())
            + self.finalized
            + self.abandoned
            + self.slots_leaked
            + self.slots_corrected
            + self.lost
            + self.archived
        )
