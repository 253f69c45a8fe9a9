"""What the thread pool and the process pool both keep: whose slots they are, who hears of a
freed slot, the size a result may have, and the StopWatch that follows each attempt they
stop until it ends."""

from __future__ import annotations

from collections.abc import Callable

from ..stopping import Stop, StopWatch


class Runner:
    """The setup both pools share (threads.py, processes.py)."""

    def __init__(
        self,
        handler: str,
        on_slot_free: Callable[[], None],
        result_max_bytes: int,
        on_stop: Callable[[Stop], None],
        stop_bound: float,
    ) -> None:
        self.handler = handler
        self.on_slot_free = on_slot_free
        self.result_max_bytes = result_max_bytes
        self.stops = StopWatch(on_stop, stop_bound)
