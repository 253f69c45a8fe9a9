"""`make bench` and the benchmarks beside it: run from scripts/ as `python -m bench` (the
workloads, `--only=...` for one), `python -m bench.lua` (Redis's work per task) and
`python -m bench.submit` (the submit path). Below the entry points: `common` (the bench's
Redis and workers, shapes, checks), then `workloads` and `report`."""
