"""Errors a user can cause. The CLI prints their message as one line and exits non-zero.

Every message says what is wrong and what to do; ``--debug`` (or ``ENERGYFORMER_DEBUG=1``) shows the
traceback. Programming errors are not ``UserError`` s: the CLI reports them as internal errors.
"""

from __future__ import annotations


class UserError(Exception):
    """Base of errors caused by user input (configs, data files, run directories, arguments)."""


class ConfigError(UserError, ValueError):
    """A configuration key or value is not allowed. The message names key, value and what is allowed."""


class DataError(UserError, ValueError):
    """A data file or data value is unusable. The message names the file (and line) where it can."""


class NonFiniteOutput(UserError, FloatingPointError):
    """A model's output is NaN or infinite where a number is needed (e.g. the logits a token is drawn from): its
    weights or its precision, a run's state for the user to change, not a wrong number to go on with."""


def brief(err: BaseException, limit: int = 80) -> str:
    """``Type: message`` of a library's error on one line, the message cut to ``limit`` characters: what a
    one-line error quotes of the reader that failed under it."""
    text = " ".join(str(err).split())[:limit]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
