"""jobcenter: a leader/follower DAG job center over Redis."""

from .builder import Job
from .client import Client
from .context import TaskContext, current_task
from .errors import Fatal, JobcenterError, Retry, SpecError, TaskCancelled
from .registry import task
from .spec import JobSpec, TaskSpec

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
    "task",
    "__version__",
]
