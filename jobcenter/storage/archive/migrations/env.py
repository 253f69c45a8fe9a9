"""Alembic's environment for the archive: engine.upgrade hands it an open connection."""

from __future__ import annotations

from alembic import context

from jobcenter.storage.archive.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
