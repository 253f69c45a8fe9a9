"""How jobcenter's data lies in Redis: the keys (keys, layout), the field names and codes
shared with the Lua scripts (schema), a finished job's packed record (packed), and the
schema version with its upgrades (upgrade)."""
