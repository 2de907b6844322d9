"""Nesterov ``form: sutskever`` evaluates its gradient at x + η β v: that η is the step's own, with the forward
context where the step size reads it (a network conditioned on the embedded input). The old look-ahead called
the step size without ctx, so a context-conditioned network gave the shift another η than the step."""

from __future__ import annotations

import torch

from energyformer.core import ForwardContext, Nesterov, NetworkStepSize

DT = torch.float64


def test_the_look_ahead_uses_the_steps_eta_with_the_context():
    torch.manual_seed(0)
    D = 4
    net = NetworkStepSize(D, embed_dim=8, condition="input", output="vector", zero_init="none", base=0.5).to(DT)
    solver = Nesterov(None, net, beta=0.5, carry_key="v", form="sutskever")
    g = torch.Generator().manual_seed(1)
    emb, m, x = (torch.randn(1, 3, D, dtype=DT, generator=g) for _ in range(3))
    ctx = ForwardContext(embedded=emb, iteration=2, iterations=4)
    ctx.carry["v"] = m
    eta = net(2, x, x, ctx=ctx)  # the η of this call's step (index = iteration × 1 step)
    torch.testing.assert_close(solver.shift(x, ctx), eta * 0.5 * m, rtol=1e-14, atol=0)


def test_the_look_ahead_eta_cannot_read_a_normalised_start_point():
    """readout 'seed' with ``norm.init: normalized`` and a step size conditioned on x0 was accepted. The look-ahead
    η saw the block input x, but the step's η saw x0 = norm(x + η β m), so they were 3e-4 apart (probe N). That η
    cannot be known before the start point it defines, so the config is refused when it loads."""
    import pytest

    from energyformer.experiment import load_run_config
    from energyformer.utils.validate import ConfigError

    a = "model.block.attention"
    sets = ["model.dim=16", "model.heads=2", "model.n_layers=2", f"{a}.step_size.kind=network"]
    with pytest.raises(ConfigError, match=r"step_size.condition = 'x0' with norm.init = 'normalized'.*allowed"):
        load_run_config("intrinsic/nag_mha", sets + [f"{a}.norm.init=normalized"])
    load_run_config("intrinsic/nag_mha", sets)  # residual start: x0 = x, one η
    load_run_config("intrinsic/nag_mha", sets + [f"{a}.norm.init=normalized", f"{a}.step_size.condition=input"])


def test_in_a_model_every_look_ahead_uses_its_steps_eta():
    """A nag_mha model with a network step size (conditioned on the model input, or on x0): each look-ahead
    call's η equals the η of the step that follows it in the same block (the old look-ahead called the
    input-conditioned network without ctx)."""
    from energyformer.models.lm import CausalLM, ModelConfig

    for condition in ("input", "x0"):
        step = {"kind": "network", "condition": condition, "zero_init": "none", "embed_dim": 8}
        cfg = ModelConfig(vocab_size=50, dim=16, n_layers=2, heads=2, max_seq_len=16, positions="learned",
                          final_norm="layer", block={"attention": {"kind": "nag_mha", "step_size": step},
                                                     "mlp": {"kind": "nag_gelu"}, "dropout": 0.0})
        torch.manual_seed(0)
        model = CausalLM(cfg).eval()
        nets = [m for m in model.modules() if isinstance(m, NetworkStepSize)]
        assert len(nets) == 2  # the attention sublayers of both layers
        etas: list[torch.Tensor] = []
        for net in nets:
            net.register_forward_hook(lambda mod, args, out: etas.append(out.detach()))
        model(torch.randint(0, 50, (1, 5)))
        # layer 0: no velocity yet, no look-ahead (1 call); layer 1: look-ahead then step (2 calls)
        assert len(etas) == 3
        torch.testing.assert_close(etas[1], etas[2], rtol=0, atol=0)
