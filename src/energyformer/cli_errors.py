"""How the command line ends on an error or shows a warning: one line each (``energyformer: error: ...``), with the
exit code, never a traceback unless ``--debug`` (or ``ENERGYFORMER_DEBUG=1``) asks for it (split from
:mod:`energyformer.cli`).

:func:`describe_error`: a user error (:class:`~energyformer.errors.UserError`, a config validation error) says
what to change and exits 2 (a model's non-finite output, :class:`~energyformer.errors.NonFiniteOutput`, exits 1 as
eval's non-finite metrics do); an OS error names what failed and the path; running out of host or device memory says
which sizes to lower; anything else is an internal error naming its type, exit 1.
"""

from __future__ import annotations

import os
import sys


def describe_error(err: BaseException) -> tuple[str, int]:
    """(one-line message, exit code) for an error that ends a command."""
    import errno

    from pydantic import ValidationError

    from .errors import NonFiniteOutput, UserError
    from .utils.config import format_validation_error

    if isinstance(err, NonFiniteOutput):  # a run's weights or precision, as eval's non-finite metrics: exit 1
        return str(err), 1
    if isinstance(err, UserError):  # also TrainingDiverged and CheckpointError: a run's state, a user's choice to make
        return str(err), 2
    if isinstance(err, ValidationError):
        return format_validation_error(err), 2
    if isinstance(err, FileExistsError):
        return str(err), 2
    if isinstance(err, OSError):
        what = {errno.ENOSPC: "no space left on device", errno.EACCES: "permission denied",
                errno.EROFS: "read-only file system", errno.ENOTDIR: "a parent of the path is a file, not a directory",
                errno.EISDIR: "is a directory", errno.ENOENT: "not found",
                errno.EDQUOT: "disk quota exceeded"}.get(err.errno, err.strerror or str(err))
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        return f"{what}{where}", 1
    text = str(err)
    if isinstance(err, MemoryError) and text.startswith("not enough memory"):  # already says what to change
        return text, 1
    if out_of_memory(err):
        return ("not enough memory for this configuration (try a smaller model.dim, task.batch_size or "
                "sequence length)"), 1
    name = type(err).__name__
    if name == "EvaluationFailed":  # a bug in an evaluation; the run's checkpoint is safe
        return f"{text}; rerun with --debug for the traceback", 1
    return f"internal error ({name}: {' '.join(text.split())[:300]}); rerun with --debug for the traceback", 1


def out_of_memory(err: BaseException) -> bool:
    """whether ``err`` is the host's or the device's allocator running out (MemoryError, or torch's own message),
    or a tensor too large to address at all (torch's "Storage size calculation overflowed": a batch size near
    2^63, which the int64 bound on config integers lets through)"""
    text = str(err)
    return (isinstance(err, MemoryError) or "can't allocate memory" in text or "out of memory" in text.lower()
            or "Storage size calculation overflowed" in text)


def debug_env() -> bool:
    """ENERGYFORMER_DEBUG set (and not 0): tracebacks, as --debug."""
    return os.environ.get("ENERGYFORMER_DEBUG", "") not in ("", "0")


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings as one line of their own (no Python category, source file or code line)."""
    text = " ".join(str(message).split())
    print(f"energyformer: warning: {text}", file=file if file is not None else sys.stderr)
