"""ModelOutput.iteration_states picks the last layer (mutation probe AI)."""

import torch

from energyformer.models.lm import CausalLM, ModelConfig


def _lm():
    torch.manual_seed(0)
    return CausalLM(ModelConfig(vocab_size=30, dim=16, n_layers=3, heads=2, iterations=2, max_seq_len=8))


def test_iteration_states_default_to_the_last_layer_and_index_layers_in_order():
    # Pins ``sorted`` layer indices: layer=-1 is the last layer of the stack, layer=0 the first.
    out = _lm()(torch.randint(0, 30, (1, 5)), hiddens=True)
    states = out.iteration_states()
    assert len(states) == 3 and states[0] is out.embedded
    assert states[1] is out.hiddens[(2, 0)] and states[2] is out.hiddens[(2, 1)]
    assert out.iteration_states(0)[1] is out.hiddens[(0, 0)]

