"""The archive: finished jobs kept in a SQL database (SQLite on one machine, PostgreSQL in
production) after Redis lets them go. `tables` is the schema both the writer and the reader
work from."""
