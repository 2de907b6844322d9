"""Depth traces of intrinsic-optimizer models: "layer = optimiser iteration" (seed 001 §2.1 (ii), §3.1).

For each layer l of a trained model and a batch of tokens, :func:`depth_traces` records

* ``F_l`` — the attention sublayer's own free energy (its energy module's ``energy``: the hypersphere
  multi-head free energy of its query/key subspaces for MHA-type heads, the elastic one for the
  Newton heads), with keys prepared once from the layer input, evaluated at LN of the stream
  **before** the attention sublayer, **after** it, and **after** the FFN;
* ``‖m‖`` — the mean per-token norm of the velocity carried in ``ctx.carry`` after each sublayer
  (momentum / Nesterov variants; absent otherwise).

A descent step lowers ``F_l`` from "before" to "after attention" when the layer behaves as the
seed's picture says; the trace shows whether it does (it is measured, not assumed: with untied
W_V, W_O an MHA step need not lower it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from ..blocks.intrinsic import IntrinsicBlock
from .figures import save_figure


@torch.no_grad()
def depth_traces(model: nn.Module, idx: Tensor) -> dict[str, list[float]]:
    """{'before', 'after_attn', 'after_ffn'} free energies per layer and 'velocity' norms per sublayer.

    Layer l's three values are F_l(u | LN(x_l)) at u = LN(x_l), LN(after attention), LN(after the MLP): one energy,
    its context fixed by the layer's input x_l, so they compare. A velocity is the mean over tokens of the carried
    momentum's norm (independent of the batch's size). The model's training mode is restored, also on an error."""
    layers = list(model.layers)
    states: dict[int, dict[str, Tensor]] = {i: {} for i in range(len(layers))}
    velocity: list[float] = []
    hooks = []

    def carry_norm(ctx) -> float | None:
        ms = [v for v in ctx.carry.values() if isinstance(v, Tensor)]
        return float(ms[0].norm(dim=-1).mean()) if ms else None

    for i, layer in enumerate(layers):
        def pre(mod, args, i=i):
            states[i]["before"] = args[0]

        def post_attn(mod, args, out, i=i):
            states[i]["after_attn"] = out
            v = carry_norm(args[1]) if len(args) > 1 and args[1] is not None else None
            if v is not None:
                velocity.append(v)

        def post_ffn(mod, args, out, i=i):
            states[i]["after_ffn"] = out
            v = carry_norm(args[1]) if len(args) > 1 and args[1] is not None else None
            if v is not None:
                velocity.append(v)

        hooks += [layer.attn.register_forward_pre_hook(pre), layer.attn.register_forward_hook(post_attn),
                  layer.mlp.register_forward_hook(post_ffn)]
    was = model.training
    try:
        model.eval()
        model(idx)
    finally:
        model.train(was)
        for h in hooks:
            h.remove()
    out: dict[str, list[float]] = {"before": [], "after_attn": [], "after_ffn": [], "velocity": velocity}
    for i, layer in enumerate(layers):
        attn = layer.attn
        if not isinstance(attn, IntrinsicBlock):
            raise TypeError(f"layer {i}: attention is a {type(attn).__name__}, not an intrinsic kind")
        h = attn.norm(states[i]["before"])
        st = attn.energy.prepare(h)
        for key in ("before", "after_attn", "after_ffn"):
            u = h if key == "before" else attn.norm(states[i][key])
            out[key].append(float(attn.energy.energy(u, st).mean()))
    return out


def plot_depth_traces(traces: dict[str, dict[str, list[float]]], path: Path) -> Path:
    """Depth traces (one line per run: :func:`depth_traces` of its trained model, as the study records
    them) -> PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    for name, tr in traces.items():
        color = None
        for layer in range(len(tr["before"])):  # one segment per layer: each layer has its own energy
            line, = ax1.plot([layer, layer + 0.5, layer + 1.0],
                             [tr["before"][layer], tr["after_attn"][layer], tr["after_ffn"][layer]],
                             marker=".", color=color, label=name if layer == 0 else None)
            color = line.get_color()
        if tr["velocity"]:
            ax2.plot([0.5 * (k + 1) for k in range(len(tr["velocity"]))], tr["velocity"], marker="o",
                     color=line.get_color(), label=name)
    ax1.set_xlabel("layer l: F_l at l (before attention), l + 0.5 (after it), l + 1 (after the FFN)")
    ax1.set_ylabel("attention free energy F_l (mean over tokens)")
    ax1.set_title("free energy of each layer's attention, before/after its sublayers")
    ax2.set_xlabel("layer (after attention at x.5, after FFN at x+1)")
    ax2.set_ylabel("mean per-token norm of the velocity m")
    ax2.set_title("carried momentum across depth")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
