"""The worker daemon, in rooms: its lifecycle (start, stop, drain: lifecycle.py), the claim
and leader loops (claiming.py), its reports of ended attempts (reporting.py), its heartbeats
and presence (heartbeats.py), over the state they share (state.py)."""

from .lifecycle import EXIT_LOOP_FAILED, Worker
from .state import Options, Running

__all__ = ["EXIT_LOOP_FAILED", "Options", "Running", "Worker"]
