"""jobcenter: a leader/follower DAG job center over Redis."""

from jobcenter.model.builder import Job
from jobcenter.model.spawn import spawn
from jobcenter.model.spec import JobSpec, TaskSpec
from jobcenter.runtime.context import TaskContext, current_task
from jobcenter.runtime.hooks import on_job_finished
from jobcenter.runtime.registry import gate, task

from .client import Client
from .errors import Fatal, JobcenterError, Retry, SpecError, TaskCancelled

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Fatal",
    "Job",
    "JobSpec",
    "JobcenterError",
    "Retry",
    "SpecError",
    "TaskCancelled",
    "TaskContext",
    "TaskSpec",
    "current_task",
    "gate",
    "on_job_finished",
    "spawn",
    "task",
    "__version__",
]
