"""The web dashboard (`jobcenter dashboard`): Starlette pages over the Client and the read
models of `jobcenter.storage.views`, the DAG laid out in the browser by dagre (vendored under
static/vendor). Needs the `dashboard` extra: pip install 'jobcenter[dashboard]'."""
