"""A one-line note when a training run is stopped by SIGTERM (:meth:`~energyformer.train.trainer.Trainer.fit`).

SIGTERM keeps its default meaning — the process ends at once with exit status 143 and nothing is saved; the checkpoints
on disk are intact (each is published by an atomic rename) — but the user learns the step reached and which checkpoint
``--resume`` continues from.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .checkpoint import checkpoint_step, latest_checkpoint


def install_sigterm_note(trainer: Any) -> Callable[..., None] | None:
    """While ``trainer.fit`` runs (single process, main thread, SIGTERM at its default), a SIGTERM prints one line
    naming the step reached and the last checkpoint, then ends the process by SIGTERM as before (exit
    143, nothing saved: the checkpoints on disk are intact). Returns the handler installed, if any."""
    if (trainer.ddp or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return None

    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        ckpt = trainer.last_checkpoint
        with contextlib.suppress(OSError):  # a save that was published but not yet returned to us
            newest = latest_checkpoint(trainer.out_dir)
            if newest is not None and (ckpt is None or not ckpt.is_dir()
                                       or (checkpoint_step(newest) or -1) > (checkpoint_step(ckpt) or -1)):
                ckpt = newest
        where = (f"the last checkpoint is {ckpt} (step {checkpoint_step(ckpt)}); --resume continues from it"
                 if ckpt is not None else "no checkpoint was written yet")
        lead = "\n" if trainer._pbar is not None and not trainer._pbar.disable else ""  # below the progress bar
        # os.write, not print: the signal may arrive in the middle of a write to sys.stderr
        with contextlib.suppress(OSError):
            os.write(2, f"{lead}energyformer: terminated (SIGTERM) at step {trainer.step}; {where}\n".encode())
        os.kill(os.getpid(), signal.SIGTERM)  # the default action now: exit as a SIGTERM always did
        time.sleep(5)
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    return on_term
