"""Tasks, registered by name (``energyformer list tasks``). Importing this package registers them all."""

from .base import TASKS, Task, TaskConfig, register_task
from . import gp, lm  # noqa: F401  (registration)

__all__ = ["TASKS", "Task", "TaskConfig", "register_task"]
from . import classification  # noqa: F401,E402  (image classification, Hyper-SET §5.2)
