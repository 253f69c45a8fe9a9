"""The archive's first tables: archived_jobs, archived_tasks, archived_attempts.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from jobcenter.storage.archive.tables import archived_attempts, archived_jobs, archived_tasks

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# tables.py as it stands is revision 0001's schema: a later change to it comes with a
# migration of its own, and first freezes the definitions this one creates into this file.
TABLES = (archived_jobs, archived_tasks, archived_attempts)


def upgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        table.create(bind)


def downgrade() -> None:
    bind = op.get_bind()
    for table in reversed(TABLES):
        table.drop(bind)
