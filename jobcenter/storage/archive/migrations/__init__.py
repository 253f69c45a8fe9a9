"""The archive's Alembic migrations (engine.upgrade runs them; versions/ holds one file per
revision, the first creating tables.py's schema)."""
