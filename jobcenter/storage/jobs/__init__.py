"""Jobs and tasks in Redis, one module per concern: submit, attempts (claim to complete),
lifecycle (the leader's steps, compaction, cancel, restore, delete), reads and presence.
`jobcenter.storage.store.Store` composes them; the rest of the package knows only Store."""
