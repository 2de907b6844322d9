"""Tasks, registered by name (``energyformer list tasks``). Importing this package registers them all."""

from .base import TASKS, Task, TaskConfig, register_task
from . import gp, lm  # noqa: F401  (registration)
from . import sudoku  # noqa: F401,E402  (Hyper-SET Sudoku)

__all__ = ["TASKS", "Task", "TaskConfig", "register_task"]
from . import potts_mlm  # noqa: E402,F401  (registers "potts_mlm"; seed 004)
from . import denoise  # noqa: E402,F401  (registers "denoise"; seed 004)
from . import classification  # noqa: F401,E402  (image classification, Hyper-SET §5.2)
from . import parity  # noqa: E402,F401  (registers "parity"; EqT seed 003)
from . import masked_images  # noqa: E402,F401  (registers "masked_image_modelling"; Hyper-SET §5.3)
