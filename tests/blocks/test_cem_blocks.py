import pytest
import torch

from energyformer.blocks.baselines import LlamaAttention, SwiGLU
from energyformer.blocks.cem import CEMAttention, CEMAttentionConfig, CEMMLP, CEMMLPConfig
from energyformer.core import make_preconditioner
from energyformer.utils.validate import ConfigError


def n_params(m):
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("D,H", [(64, 4), (96, 8)])
def test_cem_attention_is_half_of_llama_attention(D, H):
    llama = LlamaAttention(D, H)
    cem = CEMAttention(D, H, CEMAttentionConfig(diagonal="none", alibi=False, self_bias=False))
    assert n_params(llama) == 4 * D * D + D  # W_Q, W_K, W_V, W_O + RMSNorm
    assert n_params(cem) == 2 * D * D + D    # tied W_Q = W_O, W_K = W_V + RMSNorm
    # the seed's options add small terms on top: shared diagonal D, self bias H, per-head diag precond H*D
    cem2 = CEMAttention(D, H, CEMAttentionConfig(precond="diagonal"))
    assert n_params(cem2) == 2 * D * D + D + D + H + H * D
    cem3 = CEMAttention(D, H, CEMAttentionConfig(precond="diag_low_rank", diagonal="per_head"))
    assert n_params(cem3) == 2 * D * D + D + H * D + H + H * (D + 2 * D * 4)


@pytest.mark.parametrize("D,Dm", [(64, 176), (96, 256)])
def test_cem_mlp_is_two_thirds_of_swiglu(D, Dm):
    assert n_params(SwiGLU(D, Dm)) == 3 * D * Dm + D
    assert n_params(CEMMLP(D, CEMMLPConfig(hidden=Dm))) == 2 * D * Dm + D
    assert n_params(CEMMLP(D, CEMMLPConfig(hidden=Dm, precond="diag_low_rank"))) == 2 * D * Dm + D + D + 2 * D * 16


def test_cem_mlp_t1_equals_gated_mlp_with_tied_weights():
    D, Dv = 24, 40
    blk = CEMMLP(D, CEMMLPConfig(hidden=Dv)).double()
    x = torch.randn(3, 5, D, dtype=torch.float64)
    h = blk.norm(x)
    W, V = blk.energy.W.weight, blk.energy.V.weight
    ref = x + ((h @ W.T) * torch.nn.functional.silu(h @ V.T)) @ V  # W^d = Vᵀ, W^u = V, W^g = W
    torch.testing.assert_close(blk(x), ref, rtol=1e-12, atol=1e-12)


def test_cem_mlp_recursion_keeps_gate_fixed():
    D, Dv = 8, 12
    blk = CEMMLP(D, CEMMLPConfig(hidden=Dv, steps=3, step_size=0.5)).double()
    x = torch.randn(2, 3, D, dtype=torch.float64)
    gamma = blk.energy.W(blk.norm(x))
    ref = x
    for _ in range(3):
        u = blk.norm(ref)
        ref = ref + 0.5 * (gamma * torch.nn.functional.silu(u @ blk.energy.V.weight.T)) @ blk.energy.V.weight
    torch.testing.assert_close(blk(x), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: CEMAttentionConfig(diagonal="diag"), ["diagonal", "'diag'", "'shared'", "'per_head'"]),
        (lambda: CEMAttentionConfig(steps=0), ["steps", "0", "greater than or equal to 1"]),
        (lambda: CEMMLPConfig(steps=-1), ["steps", "-1", "greater than or equal to 1"]),
        (lambda: CEMAttention(64, 4, CEMAttentionConfig(precond="diag_low_rank", precond_rank=64)),
         ["precond_rank", "64", "[1, 63]"]),
        (lambda: CEMAttention(64, 5), ["heads", "5", "64"]),
        (lambda: CEMAttentionConfig(precond="lowrank"), ["precond", "'lowrank'", "'diag_low_rank'"]),
        (lambda: make_preconditioner("diag_low_rank", 8, rank=0), ["rank", "0"]),
    ],
)
def test_bad_options_name_option_value_and_allowed(make, needle):
    with pytest.raises((ConfigError, ValueError)) as err:
        make()
    msg = str(err.value)
    for n in needle:
        assert n in msg, (n, msg)


def test_preconditioner_init_and_fold():
    P = make_preconditioner("diag_low_rank", 12, rank=4, heads=3).double()
    torch.testing.assert_close(P.diag(), torch.full((3, 12), torch.nn.functional.softplus(torch.tensor(1.0)).item(),
                                                    dtype=torch.float64))
    assert P.min_eigenvalue() > 0
    with torch.no_grad():
        P.V.normal_(0, 0.1)
    w = torch.randn(3, 12, 5, dtype=torch.float64)
    torch.testing.assert_close(P.fold(w), P.matrix() @ w)
    M = P.matrix()
    torch.testing.assert_close(M, M.transpose(-1, -2))


@pytest.mark.parametrize("diagonal", ["shared", "per_head"])
def test_weight_decay_groups_by_role_not_rank(diagonal):
    """CEM seed §4.4 compares shared and per-head diagonals: neither may be decayed (nor P, η, biases)."""
    from energyformer.models import CausalLM, ModelConfig
    from energyformer.train.roles import describe_param_groups
    from energyformer.utils.config import load_config

    cfg = load_config(ModelConfig, {"vocab_size": 50, "dim": 32, "heads": 4, "n_layers": 1, "block": {
        "attention": {"kind": "cem", "precond": "diag_low_rank", "learn_step_size": True, "diagonal": diagonal},
        "mlp": {"kind": "cem", "precond": "diagonal", "learn_step_size": True}}})
    groups = describe_param_groups(CausalLM(cfg))
    decayed = {n for g in groups.values() if g["decay"] for n in g["names"]}
    assert decayed == {"layers.0.attn.energy.wq.weight", "layers.0.attn.energy.wk.weight",
                       "layers.0.mlp.energy.W.weight", "layers.0.mlp.energy.V.weight"}
    assert groups["diagonal"]["names"] == ["layers.0.attn.energy.d"]
    assert groups["position"]["names"] == ["layers.0.attn.energy.self_bias"]
    assert set(groups["step_size"]["names"]) == {"layers.0.attn.solver.step_size.theta",
                                                  "layers.0.mlp.solver.step_size.theta"}
    assert len(groups["precond"]["names"]) == 4  # attention p, U, V; MLP p


@pytest.mark.parametrize("per_head", [True, False])
def test_weight_decay_never_touches_any_preconditioner_part(per_head):
    """Every CEM preconditioner parameter (diagonal p, low-rank U and V; per-head banks and shared P; attention
    and MLP) has the role ``precond`` and is not decayed; only the four projection matrices are."""
    from energyformer.models import CausalLM, ModelConfig
    from energyformer.train.roles import describe_param_groups
    from energyformer.utils.config import load_config

    cfg = load_config(ModelConfig, {"vocab_size": 50, "dim": 32, "heads": 4, "n_layers": 1, "block": {
        "attention": {"kind": "cem", "precond": "diag_low_rank", "precond_per_head": per_head},
        "mlp": {"kind": "cem", "precond": "diag_low_rank", "precond_rank": 8}}})
    model = CausalLM(cfg)
    groups = describe_param_groups(model)
    precond = {n for n, _ in model.named_parameters() if ".precond." in n}
    assert precond == {f"layers.0.{part}.solver.precond.{p}" for part in ("attn", "mlp") for p in "pUV"}
    assert set(groups["precond"]["names"]) == precond and not groups["precond"]["decay"]
    bank = model.layers[0].attn.solver.precond
    assert (bank.U.shape[0] == 4) == per_head  # a per-head bank of U_k
    decayed = {n for g in groups.values() if g["decay"] for n in g["names"]}
    assert decayed == {"layers.0.attn.energy.wq.weight", "layers.0.attn.energy.wk.weight",
                       "layers.0.mlp.energy.W.weight", "layers.0.mlp.energy.V.weight"}


@pytest.mark.parametrize("alibi", [True, False])
def test_cem_block_compiles_into_one_graph_on_the_blocked_path(alibi, compiles_like_eager):
    """A CEM model (attention and MLP, T=2, causal, ALiBi or not) on the blocked path — the CPU's ``auto`` — is
    traced by torch.compile(fullgraph=True) without a break (the ALiBi slopes go in as a tensor, not through
    ``tolist`` and the eager bias cache), and its logits and gradients equal eager ones (aot_eager backend)."""
    from energyformer.models import CausalLM, ModelConfig
    from energyformer.utils.config import load_config

    torch.manual_seed(0)
    m = CausalLM(load_config(ModelConfig, {"vocab_size": 97, "dim": 32, "heads": 4, "n_layers": 2, "block": {
        "attention": {"kind": "cem", "attn_path": "blocked", "steps": 2, "alibi": alibi},
        "mlp": {"kind": "cem", "steps": 2}}}))
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    compiles_like_eager(lambda: m(idx).logits, m.parameters())
