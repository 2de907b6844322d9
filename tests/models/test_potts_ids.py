"""Token ids of the Potts models (models/potts_ids.py): one range check per forward, one host transfer."""

import pytest
import torch

from energyformer.models.potts_ids import check_colour_ids


def test_ids_in_range_pass_and_out_of_range_name_the_range_found():
    check_colour_ids(torch.tensor([[0, 3, 4]]), 4)        # 4 = the mask
    check_colour_ids(torch.zeros(0, 5, dtype=torch.long), 4)
    for bad, found in ((torch.tensor([[0, 5]]), "[0, 5]"), (torch.tensor([[-1, 2]]), "[-1, 2]")):
        with pytest.raises(ValueError, match=rf"token ids in \{found}; allowed 0..3 \(colours\) and 4 \(mask\)"):
            check_colour_ids(bad, 4)


def _potts_models(**bare):
    from energyformer.models import MODELS
    from energyformer.models.bare_attention import BareSAConfig
    from energyformer.models.factored import FactoredConfig

    torch.manual_seed(0)
    return (MODELS.build(BareSAConfig(n_tokens=5, dim=4, n_colours=4, init_std=0.5, **bare)),
            MODELS.build(FactoredConfig(n_tokens=5, n_colours=4)))


def test_on_an_accelerator_the_forward_reads_no_id_on_the_host(monkeypatch, host_reads):
    """Where a host read stalls the device (``core.precision.host_read_stalls``, pretended here) the Potts models'
    forward checks the ids without a host read (``torch._assert_async``; on this CPU stand-in it raises at once,
    on a GPU at the next sync). Before, every forward read the ids' range with ``aminmax(...).tolist()``. On the
    CPU a bad id still raises the one-line ValueError naming the range found and the range allowed."""
    from energyformer.core import precision

    ok = torch.tensor([[0, 3, 4, 1, 2]])
    # mask_init random: its embed read masked.any() on the host at every forward (now a where, vectors kept)
    models = [*_potts_models(), _potts_models(mask_init="random")[0]]
    plain = [m(ok).logits for m in models]
    with monkeypatch.context() as m:
        m.setattr(precision, "host_read_stalls", lambda t: True)
        # factored's one_hot reads the ids' range on a CPU only (CUDA skips that with num_classes given): stand-in
        m.setattr(torch.nn.functional, "one_hot",
                  lambda t, n: torch.zeros(*t.shape, n, dtype=torch.long).scatter_(-1, t[..., None], 1))
        with host_reads() as reads:
            got = [model(ok).logits for model in models]
            check_colour_ids(ok, 4)
        assert reads.n == 0
        for a, b in zip(got, plain):
            assert torch.equal(a, b)
        for model in models:
            with pytest.raises(RuntimeError, match=r"id is out of range; allowed 0..3 \(colours\) and 4 \(mask\)"):
                model(torch.tensor([[0, 1, 2, 5, 0]]))
    for model in models:
        with pytest.raises(ValueError, match=r"^token ids in \[-1, 2\]; allowed 0..3 \(colours\) and 4 \(mask\)$"):
            model(torch.tensor([[0, -1, 2, 1, 0]]))
