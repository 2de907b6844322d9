"""A kernel-specific GP option set to a non-default value on a kernel that does not read it is a one-line
ConfigError (it used to be ignored: ``--set task.kernel.period=3`` on RBF gave the same RMSEs as without it)."""

from __future__ import annotations

import pytest

from energyformer.data.gp import KERNELS, KernelConfig
from energyformer.errors import ConfigError
from energyformer.experiment import load_run_config
from energyformer.utils.config import dumps_yaml, from_dict, replace, to_dict

OWNER = {"nu": "matern", "period": "periodic", "alpha": "rq", "beta": "gibbs"}  # the kernel reading each option


@pytest.mark.parametrize("key, value", [("nu", 0.5), ("period", 3.5), ("alpha", 2.5), ("beta", 0.1)])
def test_option_of_another_kernel_refused(key, value):
    """Old: accepted and ignored on every kernel but its own."""
    owner = OWNER[key]
    for name in KERNELS:
        if name == owner:
            assert getattr(KernelConfig(name=name, **{key: value}), key) == value
        else:
            with pytest.raises(ConfigError, match=f"^{key} = {value}: only the {owner} kernel uses it "
                                                  f"\\(kernel is {name}\\)"):
                KernelConfig(name=name, **{key: value})


def test_run_config_names_the_full_key():
    with pytest.raises(ConfigError, match=r"^task\.kernel\.nu = 0\.5: only the matern kernel uses it "
                                          r"\(kernel is rbf\)"):
        load_run_config("gp/cem_t1", ["task.kernel.nu=0.5"])
    cfg = load_run_config("gp/cem_t1", ["task.kernel.name=matern", "task.kernel.nu=0.5"])
    assert cfg.task.kernel.nu == 0.5


def test_defaults_and_resolved_configs_still_load():
    """Every key at its default passes, so a saved resolved config (all keys listed) and a switch of
    task.kernel.name alone (the study grids) load; switching away from a non-default option is refused."""
    cfg = load_run_config("gp/cem_t1", ["task.kernel.nu=1.5"])  # the default: nothing to ignore
    again = from_dict(type(cfg), to_dict(cfg))
    assert dumps_yaml(again) == dumps_yaml(cfg)
    for name in KERNELS:
        assert replace(cfg.task, kernel=KernelConfig(name=name)).kernel.name == name
    with pytest.raises(ConfigError, match="nu = 2.5: only the matern kernel uses it"):
        load_run_config("gp/cem_t1", ["task.kernel.name=matern", "task.kernel.nu=2.5", "task.kernel.name=rq"])
