"""One LayerStack (cycle / consecutive order), one init pass, one ModelOutput with hidden states per
(layer, iteration), one place where tasks add auxiliary losses."""

import pytest
import torch
from torch import nn

from energyformer.blocks import BlockConfig
from energyformer.core import ForwardContext
from energyformer.models import MODELS, CausalLM, LayerStack, ModelConfig, ModelOutput
from energyformer.models.config import StackConfig
from energyformer.models.masked_vision import MaskedVisionConfig
from energyformer.models.vision import VisionConfig
from energyformer.models.wrapper import POSITIONS
from energyformer.tasks.base import Task


class Add(nn.Module):
    def __init__(self, c: float):
        super().__init__()
        self.c = c

    def forward(self, x, ctx=None):
        return 2 * x + self.c


@pytest.mark.parametrize("order,expected", [
    ("cycle", [(0, 0), (1, 0), (0, 1), (1, 1)]), ("consecutive", [(0, 0), (0, 1), (1, 0), (1, 1)])])
def test_both_orders_are_one_stack_and_record_every_layer_and_iteration(order, expected):
    x = torch.zeros(1, 1, 1)
    hiddens: dict = {}
    y = LayerStack([Add(1.0), Add(10.0)], iterations=2, order=order, input_injection="add")(x + 1, ForwardContext(),
                                                                                          hiddens=hiddens)
    assert list(hiddens) == expected and hiddens[expected[-1]] is y
    # by hand: e = 1; cycle: l0 -> 3, l1 -> 16, +e -> 17, l0 -> 35, l1 -> 80; consecutive:
    # l0 -> 3, +e -> 4, l0 -> 9; l1 -> 28, +e -> 29, l1 -> 68
    assert float(y) == (80.0 if order == "cycle" else 68.0)


def test_every_stack_model_shares_the_stack_config():
    for cfg in (ModelConfig, VisionConfig, MaskedVisionConfig):
        assert issubclass(cfg, StackConfig)
        assert {"dim", "heads", "n_layers", "iterations", "stack_order", "block", "init"} <= set(cfg.model_fields)
    assert ModelConfig().stack_order == "cycle" and VisionConfig().stack_order == "consecutive"


def test_model_output_hidden_states_are_the_iteration_states():
    torch.manual_seed(0)
    m = CausalLM(ModelConfig(vocab_size=20, dim=16, n_layers=1, heads=2, iterations=3)).eval()
    idx = torch.randint(0, 20, (2, 5))
    out = m(idx, hiddens=True)
    assert isinstance(out, ModelOutput) and list(out.hiddens) == [(0, 0), (0, 1), (0, 2)]
    xs = out.iteration_states()
    assert len(xs) == 4 and xs[0] is out.embedded
    by_hand = m.layers[0](m.layers[0](xs[1], ForwardContext(iteration=1)), ForwardContext(iteration=2))
    torch.testing.assert_close(xs[3], by_hand)
    torch.testing.assert_close(out.logits, m(idx).logits)
    assert m(idx).hiddens is None
    with pytest.raises(ValueError, match="hiddens=True"):
        m(idx).iteration_states()


def test_token_models_run_every_module_init_hook(monkeypatch):
    """TokenModel used to skip reset_energy_parameters (the vision models ran it): now one pass runs
    it once, after the generic rule, for every model kind."""
    from energyformer.energies.hopfield import HopfieldEnergy

    calls = []
    orig = HopfieldEnergy.reset_energy_parameters
    monkeypatch.setattr(HopfieldEnergy, "reset_energy_parameters", lambda self: (calls.append(self), orig(self)))
    cfg = ModelConfig(vocab_size=12, dim=16, heads=2, n_layers=1, causal=False,
                      block=BlockConfig(attention="et", mlp="identity"))
    m = MODELS.build(cfg, n_out=3)
    hop = [mod for mod in m.modules() if isinstance(mod, HopfieldEnergy)]
    assert hop and calls.count(hop[0]) == 2  # once in its constructor, once by the model's init pass


def test_positions_literal_is_the_registry():
    assert set(ModelConfig.model_fields["positions"].annotation.__args__) == set(POSITIONS.names())


def test_aux_losses_are_added_in_one_place():
    out = ModelOutput(logits=torch.zeros(1), aux_losses={"a": torch.tensor(0.5), "b": torch.tensor(0.25)})
    loss, metrics = Task.add_aux_losses(torch.tensor(1.0), out, {"ce": 1.0})
    assert float(loss) == 1.75 and metrics == {"ce": 1.0, "a": 0.5, "b": 0.25}
    loss, metrics = Task.add_aux_losses(torch.tensor(1.0), ModelOutput(logits=torch.zeros(1)))
    assert float(loss) == 1.0 and metrics == {}
