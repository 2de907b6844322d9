"""How a study's runs are trained — one after another here or in ``jobs`` spawned workers — and how a signal
stops them (split from :mod:`~energyformer.studies.runner`, which says what a run is and records it).

SIGTERM or Ctrl-C (with any ``jobs``) stops every run at a step boundary with its checkpoint saved: the trainer's
own Ctrl-C path (it saves the step it completed) is raised between steps, never while it applies one
(:attr:`~energyformer.train.Trainer.applying_step`). The finished runs are recorded, the stopped ones named with the
command that continues them (:func:`_report_stop`), and the process exits 143 or 130; a second signal kills
(checkpoints are published by atomic renames, so the last good one survives). A worker whose parent died stops the
same way: none is left training, holding its run directory's lock.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable

from .plan import RunPlan


def train_serial(train: Callable[..., dict], todo: list[RunPlan], at: dict[str, int], args: tuple, out: str,
                 stop: tuple, finish: Callable[[RunPlan, dict], None]) -> None:
    """Train ``todo`` one after another here (``train(plan, *args, out=out)``, the runner's ``train_one``; ``at``: the
    step of each run's checkpoint of its config, 0 for none, -1 for one of another config). Ctrl-C or
    SIGTERM (as with ``jobs > 1``; not the trainer's own SIGTERM, which saves nothing) stops the run at a step boundary
    with its checkpoint saved (:func:`_report_stop`); a second is a plain Ctrl-C or SIGTERM. A run that fails is
    named and the others still train and are recorded, then the first failure is raised (:func:`_raise_failed`), as
    with ``jobs > 1`` (the first failure used to end the study, the later runs never started)."""
    steps, log = stop[1], stop[3]
    got = {"signum": 0, "deferred": False}

    def on_signal(signum: int, frame: Any) -> None:
        if got["signum"] and not got["deferred"]:
            if signum == signal.SIGTERM:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            raise KeyboardInterrupt
        got["signum"], got["deferred"] = signum, False
        got["deferred"] = _interrupt_between_steps(signum)

    usual = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, on_signal) for s, h in usual.items() if main and signal.getsignal(s) == h}
    i, stopped, failed = 0, False, []
    try:
        for i, p in enumerate(todo):
            k, n = at[p.name], steps[p.name]
            doing = (f"training {n} steps" if not k else  # k: the step of its checkpoint of this config, -1: of another
                     f"its checkpoint is of another config: training {n} steps from scratch" if k < 0 else
                     f"its checkpoint has all {n} steps: evaluating and recording it" if k >= n else
                     f"continuing from its checkpoint at step {k} of {n}")
            log(f"== {p.name}: {doing} ({i + 1}/{len(todo)})")
            try:
                rec = train(p, *args, out=out)
            except Exception as err:   # (not KeyboardInterrupt: a signal stops every run)
                log(f"== {p.name}: FAILED ({type(err).__name__}: {err})")
                failed.append((p.name, err))
                continue
            finish(p, rec)   # (an error recording it, e.g. a full disk, ends the study)
    except KeyboardInterrupt:
        stopped = True
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stopped:
        _say_failed(failed, log)
        ended = {todo[i].name: "stopped", **{p.name: "not started" for p in todo[i + 1:]}}
        _report_stop(got["signum"] or signal.SIGINT, todo, ended, stop)
    _raise_failed(failed, log)


def _say_failed(failed: list[tuple[str, Exception]], log: Callable[[str], None]) -> None:
    if failed:
        log(f"== {len(failed)} run(s) failed: {', '.join(name for name, _ in failed)}")


def _raise_failed(failed: list[tuple[str, Exception]], log: Callable[[str], None]) -> None:
    """After every other run was recorded: one line naming the failed runs, then the first one's error (its own
    type and exit code; the final error line alone did not say which run failed)."""
    if failed:
        _say_failed(failed, log)
        log(f"== the others are recorded; the error of {failed[0][0]} follows")
        raise failed[0][1]


# ----------------------------------------------------------------------------- stopping on a signal
class SeeTrainer:
    """A callback (no state, nothing saved) that shows :func:`_interrupt_between_steps` the running trainer."""

    trainer: Any = None   # the trainer of the run this process trains now

    def on_train_start(self, trainer: Any) -> None:
        SeeTrainer.trainer = trainer


def _interrupt_between_steps(signum: int) -> bool:
    """Raise KeyboardInterrupt, the trainer's Ctrl-C (it saves the step it completed), unless the trainer is applying
    a step (optimiser update and callbacks: interrupted there it saves nothing); then ``signum`` is sent again in
    10 ms and True returned (deferred)."""
    if SeeTrainer.trainer is not None and SeeTrainer.trainer.applying_step:
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
        return True
    raise KeyboardInterrupt


# ----------------------------------------------------------------------------- --jobs N: workers
#: a worker's state: whether it trains a run now, whether it was told to stop (then it starts no other run), and
#: whether that stop waits for the trainer to complete a step
_WORKER = {"busy": False, "stop": False, "deferred": False}
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _worker_init(parent: int) -> None:
    """In each worker (spawned with SIGINT and SIGTERM blocked): a terminal's Ctrl-C (to the whole process group) is
    ignored, the parent sends it on once as SIGTERM (:func:`_worker_on_term`); a thread watches for the parent's end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_on_term)
    if hasattr(signal, "pthread_sigmask"):  # one that came while the worker started is delivered now
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="energyformer-parent-watch").start()


def _worker_on_term(signum: int, frame: Any) -> None:
    """The first SIGTERM stops a training run at a step boundary (:func:`_interrupt_between_steps`) and
    :func:`_train_in_worker` reports it stopped; later ones are ignored (they never interrupt the save)."""
    first, _WORKER["stop"] = not _WORKER["stop"], True
    if (first or _WORKER["deferred"]) and _WORKER["busy"]:
        _WORKER["deferred"] = False
        _WORKER["deferred"] = _interrupt_between_steps(signum)


def _watch_parent(parent: int) -> None:
    """A worker whose parent died (SIGKILL, a crash) would train on unseen, holding its run directory's lock:
    polled with ``os.getppid`` (Linux and macOS), it stops as on SIGTERM, saves, and exits."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)
    while _WORKER["busy"]:
        time.sleep(0.1)
    os._exit(128 + signal.SIGTERM)


def _train_in_worker(train: Callable[..., dict], *args: Any) -> dict:
    """``train(*args)`` (the runner's ``train_one``) in a worker, or ``{"_stop": "not started" | "stopped"}`` once the worker was told to stop."""
    try:
        _WORKER["busy"] = True
        if _WORKER["stop"]:
            return {"_stop": "not started"}
        return train(*args)
    except KeyboardInterrupt:
        return {"_stop": "stopped"}
    finally:
        _WORKER["busy"] = False


def train_parallel(train: Callable[..., dict], todo: list[RunPlan], jobs: int, args: tuple, out: str, stop: tuple,
                   finish: Callable[[RunPlan, dict], None]) -> None:
    """Train ``todo`` in ``jobs`` spawned workers (``train``: a module-level function, sent to them by name). The parent's SIGINT/SIGTERM handler (``stopper``) sends the first
    signal on to every worker as SIGTERM (each saves at a step boundary, :func:`_worker_on_term`) and kills them on
    a second (SIGKILL; checkpoints are published by atomic renames); this loop reports, waits and records."""
    import multiprocessing as mp

    steps, log = stop[1], stop[3]
    threads = max(1, (os.cpu_count() or 1) // jobs)
    main = threading.current_thread() is threading.main_thread()
    # blocked while the workers are spawned: they inherit the mask, so no signal is lost before _worker_init
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS) if main and hasattr(signal, "pthread_sigmask") else None
    pool: ProcessPoolExecutor | None = None
    got = {"signum": 0, "count": 0}

    def stopper(signum: int, frame: Any) -> None:
        got["count"], got["signum"] = got["count"] + 1, got["signum"] or signum
        for pid in list(getattr(pool, "_processes", None) or {}):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM if got["count"] == 1 else signal.SIGKILL)

    old = {s: signal.signal(s, stopper) for s in _SIGNALS if main and signal.getsignal(s) != signal.SIG_IGN}
    pending, failed, told = {}, [], 0
    ended: dict[str, str] = {}   # run -> "stopped" / "not started" once a signal came
    try:
        pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                                   initargs=(os.getpid(),))
        for p in todo:
            log(f"== {p.name}: {steps[p.name]} steps queued ({threads} thread(s) per job, {jobs} jobs)")
            pending[pool.submit(_train_in_worker, train, p, *args, threads, out)] = p
        if mask is not None:  # a signal that came meanwhile reaches the stopper now
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            mask = None
        while pending:
            finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            if got["count"] > told:
                told = got["count"]
                log(f"== {signal.Signals(got['signum']).name}: " + (
                    "stopping every run at a step boundary; waiting for the workers to save their checkpoints"
                    if told == 1 else "killing the workers (their checkpoints on disk are intact)"))
                for f in pending:
                    f.cancel()   # those no worker has taken yet
            for f in finished:
                p = pending.pop(f)
                err = None if f.cancelled() else f.exception()
                if f.cancelled():
                    ended[p.name] = "not started"
                elif err is not None and told > 1:   # a killed worker (second signal)
                    ended[p.name] = "stopped"
                elif err is not None:   # the others still finish and are recorded first
                    log(f"== {p.name}: FAILED ({type(err).__name__}: {err})")
                    failed.append((p.name, err))
                elif "_stop" in f.result():
                    ended[p.name] = f.result()["_stop"]
                else:
                    finish(p, f.result())
    except BaseException:
        if not got["count"]:  # (e.g. results.json could not be written): the workers stop and save too
            stopper(signal.SIGTERM, None)
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for s, h in old.items():
            signal.signal(s, h)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if got["count"]:
        _say_failed(failed, log)
        _report_stop(got["signum"], todo, ended, stop)
    _raise_failed(failed, log)


def _report_stop(signum: int, todo: list[RunPlan], ended: dict[str, str], stop: tuple) -> None:
    """After a signal stopped the training: one line per stopped run (its checkpoint), the command that continues,
    then KeyboardInterrupt (Ctrl-C: the CLI says "interrupted", exit 130) or SystemExit(143) (SIGTERM)."""
    from ..train import checkpoint_step, list_checkpoints

    name, steps, run_dirs, log = stop
    for p in todo:
        if ended.get(p.name) == "stopped":
            saved = list_checkpoints(run_dirs[p.name]) if run_dirs[p.name].is_dir() else []
            log(f"== {p.name}: stopped; " + (f"its checkpoint {saved[-1]} holds step {checkpoint_step(saved[-1])} "
                                            f"of {steps[p.name]}" if saved else "no checkpoint was written yet"))
    again = (shlex.join(["energyformer", *sys.argv[1:]]) if sys.argv[1:3] == ["reproduce", name]
             else f"energyformer reproduce {name} with the same options")
    waiting = sum(v == "not started" for v in ended.values())
    log(f"== stopped by {signal.Signals(signum).name}: {len(ended) - waiting} run(s) stopped, {waiting} not started. "
        f"To continue, run the same command again ({again}): recorded runs are reused, stopped ones continue from "
        "their checkpoints")
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)
