"""How a command ends on each kind of error (cli_errors module docstring): a user or config-validation error says
what to change and exits 2; an OS error names what failed and the path, exit 1; running out of memory says which
sizes to lower; known training / checkpoint errors are their own line; anything else is an internal error."""

from __future__ import annotations

import errno

import pytest

from energyformer.cli_errors import debug_env, describe_error, show_warning


def test_a_config_validation_error_exits_2_with_the_key_named():
    from pydantic import ValidationError

    from energyformer.experiment import RunConfig

    with pytest.raises(ValidationError) as err:
        RunConfig.model_validate({"name": "../x"})
    msg, code = describe_error(err.value)
    assert code == 2 and "name" in msg and "\n" not in msg, msg


@pytest.mark.parametrize("num, says", [(errno.ENOSPC, "no space left on device"), (errno.EACCES, "permission denied"),
                                       (errno.EROFS, "read-only file system"), (errno.ENOENT, "not found"),
                                       (errno.EISDIR, "is a directory"), (errno.EDQUOT, "disk quota exceeded")])
def test_an_os_error_says_what_failed_and_names_the_path_exit_1(num, says):
    assert describe_error(OSError(num, "os text", "/runs/x/ckpt-1")) == (f"{says} (/runs/x/ckpt-1)", 1)


def test_an_os_error_without_a_path_is_its_reason_alone():
    assert describe_error(OSError(errno.ENOSPC, "os text")) == ("no space left on device", 1)


def test_an_existing_file_is_a_user_error():
    assert describe_error(FileExistsError("runs/x already holds checkpoints")) == (
        "runs/x already holds checkpoints", 2)


@pytest.mark.parametrize("err", [MemoryError(), RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                 RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
                                              "allocate memory: you tried to allocate 8 bytes"),
                                 RuntimeError("Storage size calculation overflowed with sizes=[9223372036854775807]")])
def test_running_out_of_memory_says_which_sizes_to_lower(err):
    msg, code = describe_error(err)
    assert code == 1 and msg.startswith("not enough memory for this configuration") and "model.dim" in msg, msg


def test_a_memory_error_that_already_says_what_to_change_is_kept():
    text = "not enough memory for this evaluation with --iterations 64 (memory grows with them: try smaller values)"
    assert describe_error(MemoryError(text)) == (text, 1)


def test_training_and_checkpoint_errors_are_their_own_message():
    from energyformer.train.checkpoint import CheckpointError
    from energyformer.train.contract import EvaluationFailed, TrainingDiverged

    assert describe_error(CheckpointError("no valid checkpoint in run directory r")) == (
        "no valid checkpoint in run directory r", 2)  # a UserError: exit 2
    diverged = TrainingDiverged(3, float("nan"), "loss", "runs/r/ckpt-000002")
    assert describe_error(diverged) == (str(diverged), 2) and "runs/r/ckpt-000002" in str(diverged)
    err = EvaluationFailed(4, "runs/r/ckpt-000004", KeyError("x"))
    msg, code = describe_error(err)  # a bug in an evaluation; the run's checkpoint is safe
    assert code == 1 and msg == f"{err}; rerun with --debug for the traceback" and "ckpt-000004" in msg


def test_an_internal_error_names_its_type_on_one_line():
    text = "index 7 is out of bounds for dimension 0 with size 4;\n   while gathering the logits of the batch " * 2
    msg, code = describe_error(IndexError(text))
    assert code == 1 and "\n" not in msg
    assert msg == (f"internal error (IndexError: {' '.join(text.split())}); rerun with --debug for the traceback")
    long = describe_error(KeyError("k" * 1000))[0]
    assert len(long) < 400 and long.endswith("); rerun with --debug for the traceback")


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_energyformer_debug_zero_means_off(value, on, monkeypatch):
    monkeypatch.setenv("ENERGYFORMER_DEBUG", value)
    assert debug_env() is on


def test_a_warning_goes_to_stderr_by_default(capsys):
    show_warning("a changed\n\ttrain config", UserWarning, "x.py", 1)
    got = capsys.readouterr()
    assert got.out == "" and got.err == "energyformer: warning: a changed train config\n"


def test_a_non_finite_output_says_so_and_exits_1_as_evals_non_finite_metrics():
    from energyformer.errors import NonFiniteOutput

    text = "generate: the model's logits for new token 2 are not finite (NaN, +inf, or no finite logit) in row(s) [0]"
    assert describe_error(NonFiniteOutput(text)) == (text, 1)
