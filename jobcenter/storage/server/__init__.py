"""The Redis server itself: connecting to it (one server, Sentinel or a cluster), the
embedded servers `jobcenter server` runs, what its errors and replies mean, waiting out its
outages, durability waits, its eviction policy and the rq queue recovery runs on."""
