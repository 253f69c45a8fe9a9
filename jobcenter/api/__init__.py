"""The HTTP API (`jobcenter serve`): jobs, schedules, dead letters, limits and tokens over
HTTP, and the worker protocol for executors in any language. It sits beside web/ (the
dashboard it is served with) and above client.py; its extra is `jobcenter[api]`.

problems (errors as RFC 9457 problems) and models (request and response bodies) <- auth
(tokens and scopes) <- jobs, worker, manage (the endpoints) <- app (the FastAPI app and its
document) <- serve (the process: the dashboard with the API mounted under /api/v1)."""
