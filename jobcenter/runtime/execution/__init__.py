"""Running one attempt: the outcome policy (outcome.py: `execute`, Outcome, error text),
the thread pool (threads.py, with its event loop for coroutine functions, event_loop.py) and
the process pool (processes.py, and what runs in its child, child.py)."""
