"""A tiny study for the runner tests: baseline and EqT on parity L = 8, width 16, 3 steps."""

from pathlib import Path

import yaml

TINY = {
    "title": "tiny parity study",
    "paper": {"seed": "003_787f33de758d5aaa", "section": "§4"},
    "page": "unused",
    "report": {"README.md": [{"table": {"rows": ["length", "model"], "columns": [
        {"label": "accuracy (K = 32)", "metric": "accuracy.k32", "agg": "mean_range", "fmt": ".2f"}]}},
        {"claims": ""}]},
    "runs": {"config": {"model": {"baseline": "eqt/baseline", "eqt": "eqt/eqt"}},
             "grid": {"length": {8: ["task.data.length=8"]}},
             "overrides": ["model.dim=16", "model.n_layers=1", "model.heads=2", "task.batch_size=4",
                           "task.data.n_test=8", "train.steps=3", "train.eval_every=0", "train.log_every=1",
                           "train.save_every=1", "train.keep_checkpoints=1", "train.progress=false",
                           "train.tensorboard=false"],
             "name": "L{length}_s{seed}_{model}"},
    "seeds": [0],
    "scales": {"cpu": {}, "gpu": {"overrides": ["train.device=cuda"]}},
    "metrics": {"accuracy": "energyformer.analysis.eqt_report:accuracy",
                "convergence": "energyformer.analysis.eqt_report:convergence",
                "train_ce": "energyformer.analysis.eqt_report:train_ce"},
    "claims": [{"id": "gain", "text": "EqT beats the baseline", "paper": {"value": 4.66, "source": "Table 2"},
                "a": {"where": {"model": "eqt"}, "metric": "accuracy.k32"},
                "b": {"where": {"model": "baseline"}, "metric": "accuracy.plain"}, "paired": True}],
}


def write(path: Path, **changes) -> Path:
    data = {**TINY, **changes}
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def refused(tmp_path: Path, edit) -> str:
    """The one-line ConfigError that loading TINY after ``edit(data)`` (in place, on a copy) gives."""
    import copy

    import pytest

    from energyformer.studies import load_study
    from energyformer.utils.validate import ConfigError

    data = copy.deepcopy(TINY)
    edit(data)
    with pytest.raises(ConfigError) as err:
        load_study(write(tmp_path / "s.yaml", **data))
    assert "\n" not in str(err.value)
    return str(err.value)
