"""What a training run does when a signal stops it (:meth:`~energyformer.train.trainer.Trainer.fit`).

Ctrl-C (SIGINT, ``KeyboardInterrupt``; :func:`save_on_interrupt`): a single process whose model and optimiser hold
a completed step saves a checkpoint of it, then the interrupt goes on. SIGTERM (:func:`install_sigterm_note`) keeps
its default meaning — the process ends at once with exit status 143 and nothing is saved; the checkpoints on disk
are intact (each is published by an atomic rename) — but the user learns the step reached and which checkpoint
``--resume`` continues from.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .checkpoint import checkpoint_step, latest_checkpoint

log = logging.getLogger("energyformer.train")


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


class StepBuffers:
    """The model's persistent buffers as they were before the running step, for :func:`save_on_interrupt`: a forward
    pass may write one (EqT's memory bank, ``coherence_mem``), and a Ctrl-C inside the step saved the completed
    step's weights with the unfinished step's bank — the resumed run then wrote it twice (probe AT). Cheap: each
    step reads every persistent buffer's in-place version counter and copies only those that changed in an earlier
    step; one that changes for the first time in the interrupted step has no copy (no save then)."""

    def __init__(self, model: Any):
        keys = set(model.state_dict().keys())
        self.buffers = {n: b for n, b in model.named_buffers() if n in keys}  # (in place writes: version counters)
        self.mutating: set[str] = set()
        self.versions: dict[str, int] = {}
        self.copies: dict[str, Any] = {}

    def take(self) -> None:
        """Before a step: every buffer's version, and a copy of each one that steps write."""
        self.versions = {n: b._version for n, b in self.buffers.items()}
        self.copies = {n: self.buffers[n].detach().clone() for n in self.mutating}

    def changed(self) -> list[str]:
        return [n for n, b in self.buffers.items() if b._version != self.versions.get(n, b._version)]

    def after_step(self) -> None:
        self.mutating.update(self.changed())

    def restore(self) -> list[str]:
        """Put the buffers the unfinished step wrote back as they were before it; returns those it cannot."""
        import torch

        missing = []
        for n in self.changed():
            if n in self.copies:
                with torch.no_grad():
                    self.buffers[n].copy_(self.copies[n])
            else:
                missing.append(n)
        return missing


def save_on_interrupt(trainer: Any, snapshot: dict[str, Any] | None, buffers: StepBuffers | None = None) -> None:
    """On Ctrl-C in ``trainer.fit``: save the completed step, unless under DDP (ranks cannot agree safely), inside
    the optimiser update or callbacks (not a complete step), or already saved. ``snapshot``: the data/RNG state
    from before a step that had begun (its batch and random numbers were consumed), so resuming stays exact;
    ``buffers``: the model's buffers from before it (:class:`StepBuffers`), put back before the save."""
    where = f"last checkpoint: {trainer.last_checkpoint}" if trainer.last_checkpoint else "no checkpoint yet"
    if trainer.ddp:
        log.warning("interrupted at step %d under DDP; not saving (%s)", trainer.step, where)
        return
    if trainer._in_update is not None:
        log.warning("interrupted inside the optimizer update or callbacks of step %d; the state "
                    "is not a complete step, not saving (%s)", trainer._in_update, where)
        return
    if trainer.step <= trainer._last_saved_step or trainer.step == 0:
        return
    # model/optimizer hold completed step trainer.step; if a new step had begun, its data/RNG
    # were already consumed, so save the snapshot taken before it
    rank_state = snapshot if trainer._in_step else None
    if trainer._in_step and buffers is not None:
        missing = buffers.restore()
        if missing:
            log.warning("interrupted during step %d, which wrote the model buffer(s) %s for the first time; no copy "
                        "from before it, not saving (%s)", trainer.step + 1, ", ".join(missing), where)
            return
    try:
        trainer._save(rank_state)
        msg = f"interrupted: saved checkpoint {trainer.last_checkpoint} at step {trainer.step}"
        if trainer._pbar is not None and not trainer._pbar.disable:
            trainer._pbar.write(msg)  # once: through the progress bar when it is shown, else the log
        else:
            log.warning(msg)
    except BaseException as e:  # a second Ctrl-C while saving: previous checkpoints are intact
        log.warning("interrupted: could not save a checkpoint (%r); %s", e, where)
