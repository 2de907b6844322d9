"""Language-model throughput and KV-cache size: our Llama vs Hugging Face, CEM vs Llama.

Prints, from one run on this machine (every number measured, nothing hard-coded):
  1. training-step time (forward + backward + AdamW step, float32) of our Llama baseline vs Hugging Face
     ``transformers.LlamaForCausalLM`` built with the same config (vocab, hidden size, layers, heads,
     intermediate size, rms_norm_eps=1e-6, rope_theta=1e4, untied embeddings, attn_implementation="sdpa"),
     the same batch, sequence and optimizer; parameter counts are checked first, and the HF model gets a
     copy of our weights (its logits are compared with ours) so both run the very same network;
  2. tokens/s of full CEM (T=1), CEM attention + Llama MLP and the CEM seed's recommended full CEM
     (T=2, diagonal + low-rank preconditioners; also with Algorithm 1's read-out) vs the Llama baseline
     at the same width, for a training step and an inference forward, in float32 and under bf16
     autocast (``--precisions``); "before" rows force the fused SDPA path (``attn_path: fused``, the
     only path before the blocked one) so the speed-up is measured in the same run. Ratios are the
     median [min, max] over repeats of the per-repeat ratio (variants interleaved in each repeat);
  4. (``--sections 4``) float32 training steps with ``nn.Linear`` routed through oneDNN instead of MKL
     (``benchmarks/onednn.py``), interleaved with the default, for every model;
  3. KV-cache bytes per token, CEM vs Llama, from ``kv_cache_bytes`` after a prefill of N tokens:
     CEM attention without the KQ diagonal (the cache holds only the tied keys) and with the default
     shared diagonal (the cache also holds the normalised inputs h).

Timings are medians over ``--repeats`` measurements taken after ``--warmup`` untimed steps; the models
of one comparison are measured in turn inside each repeat (interleaved, starting model rotated) so that
load changes on a shared machine hit all of them alike.

Usage: python benchmarks/lm_throughput.py [--dim 256 --layers 4 --heads 8 --mlp-hidden 704 --vocab 4096
                                           --batch 8 --seq 256 --repeats 7 --warmup 2 --threads 0]
       python benchmarks/lm_throughput.py --render-only DIR   # docs/results/cem/benchmarks.md from the outputs
Section 1 needs ``transformers`` (``pip install -e '.[bench]'``); without it that section is skipped.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _page  # noqa: E402  (a sibling: argument checks and the run header)
from _timing import fmt_ms, interleaved_times, median, paired_ratio, spread  # noqa: E402

from energyformer.blocks.cem import CEMAttentionConfig, CEMMLPConfig  # noqa: E402
from energyformer.blocks.layer import BlockConfig  # noqa: E402
from energyformer.models.lm import CausalLM, ModelConfig, kv_cache_bytes  # noqa: E402

INSTALL_HINT = "pip install -e '.[bench]'   (or: pip install 'transformers>=4.40')"


# ----------------------------------------------------------------------------------------- helpers
def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def n_params(model: nn.Module) -> int:
    """Number of distinct parameters (tied tensors counted once)."""
    return sum(p.numel() for p in model.parameters())


def model_config(vocab: int, dim: int, layers: int, heads: int, mlp_hidden: int, max_seq_len: int,
                 block: BlockConfig | None = None) -> ModelConfig:
    return ModelConfig(vocab_size=vocab, dim=dim, n_layers=layers, heads=heads, mlp_hidden=mlp_hidden,
                       max_seq_len=max_seq_len, tie_embeddings=False, block=block or BlockConfig())


def variant_blocks(before: bool = False) -> dict[str, BlockConfig]:
    """The blocks compared in section 2 (all at the model's width); ``before`` adds the fused-path rows."""
    paper = dict(steps=2, precond="diag_low_rank")
    v = {
        "Llama baseline": BlockConfig(),
        "CEM attention (T=1) + Llama MLP": BlockConfig(attention="cem"),
        "full CEM (T=1)": BlockConfig(attention="cem", mlp="cem"),
        "full CEM (T=2, D+LR precond)": BlockConfig(
            attention=CEMAttentionConfig(**paper), mlp=CEMMLPConfig(**paper)),
        "full CEM (T=2, D+LR), Algorithm 1 read-out": BlockConfig(
            attention=CEMAttentionConfig(**paper, diagonal_readout="algorithm1"), mlp=CEMMLPConfig(**paper)),
    }
    if before:
        v["before: full CEM (T=1), fused path"] = BlockConfig(
            attention=CEMAttentionConfig(attn_path="fused"), mlp="cem")
        v["before: full CEM (T=2, D+LR), fused path"] = BlockConfig(
            attention=CEMAttentionConfig(**paper, attn_path="fused"), mlp=CEMMLPConfig(**paper))
    return v


def transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return transformers.__version__


def hf_llama_from(cfg: ModelConfig):
    """A ``transformers.LlamaForCausalLM`` with the same architecture as our Llama ``CausalLM(cfg)``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if cfg.block.attention.kind != "llama" or cfg.block.mlp.kind != "swiglu" or cfg.positions != "none" \
            or cfg.final_norm != "rms" or cfg.iterations != 1:
        raise ValueError("hf_llama_from: only the Llama baseline (llama attention, swiglu MLP, RMS norm) maps to HF")
    hf_cfg = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.hidden,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_seq_len, rms_norm_eps=1e-6, rope_theta=cfg.block.attention.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings is not False, attention_bias=False, mlp_bias=False,
        attention_dropout=0.0, hidden_act="silu", initializer_range=cfg.init_std, use_cache=False,
        attn_implementation="sdpa")
    model = LlamaForCausalLM(hf_cfg)
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "sdpa":
        raise RuntimeError(f"HF model uses attn_implementation={impl!r}, expected 'sdpa'")
    return model


@torch.no_grad()
def copy_weights_to_hf(ours: CausalLM, hf) -> None:
    """Copy our Llama weights into the HF model (same layouts; both rotate (first half, second half))."""
    pairs = [(hf.model.embed_tokens.weight, ours.embed.weight), (hf.model.norm.weight, ours.norm.weight),
             (hf.lm_head.weight, ours.head.weight)]
    for a, b in zip(hf.model.layers, ours.layers):
        pairs += [(a.input_layernorm.weight, b.attn.norm.weight), (a.self_attn.q_proj.weight, b.attn.wq.weight),
                  (a.self_attn.k_proj.weight, b.attn.wk.weight), (a.self_attn.v_proj.weight, b.attn.wv.weight),
                  (a.self_attn.o_proj.weight, b.attn.wo.weight),
                  (a.post_attention_layernorm.weight, b.mlp.norm.weight),
                  (a.mlp.gate_proj.weight, b.mlp.w_gate.weight), (a.mlp.up_proj.weight, b.mlp.w_up.weight),
                  (a.mlp.down_proj.weight, b.mlp.w_down.weight)]
    copied = set()
    for dst, src in pairs:
        if dst.shape != src.shape:
            raise ValueError(f"shape mismatch {tuple(dst.shape)} vs {tuple(src.shape)}")
        dst.copy_(src)
        copied.add(id(dst))
    missing = [n for n, p in hf.named_parameters() if id(p) not in copied]
    if missing:
        raise ValueError(f"HF parameters not covered by the weight copy: {missing}")


def ours_logits(model: CausalLM, idx: Tensor) -> Tensor:
    return model(idx).logits


def hf_logits(model, idx: Tensor) -> Tensor:
    return model(input_ids=idx, use_cache=False).logits


def lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """The same loss for both implementations (our forward's own loss is this very expression)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-100)


def _onednn():
    """The sibling module ``benchmarks/onednn.py`` (a script directory, not a package)."""
    import importlib.util
    import sys
    from pathlib import Path

    if "ef_bench_onednn" not in sys.modules:
        spec = importlib.util.spec_from_file_location("ef_bench_onednn", Path(__file__).with_name("onednn.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules["ef_bench_onednn"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["ef_bench_onednn"]


def _context(precision: str, device: torch.device, onednn: bool = False, cache: bool = True):
    """bf16 autocast for precision 'bf16' (``cache``: autocast's weight-cast cache, off under CUDA-graph
    capture as PyTorch's CUDA-graph notes ask); oneDNN float32 linears when ``onednn``; not bf16 or fp32: error."""
    import contextlib

    _page.check_precision(precision)

    onednn_linear = _onednn().onednn_linear

    stack = contextlib.ExitStack()
    if precision == "bf16":
        stack.enter_context(torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache))
    if onednn:
        stack.enter_context(onednn_linear())
    return stack


def make_train_step(model: nn.Module, logits_fn: Callable, idx: Tensor, targets: Tensor,
                    lr: float = 3e-4, precision: str = "fp32", onednn: bool = False,
                    foreach: bool | None = None) -> Callable[[], None]:
    """One training step: zero grads, forward, loss, backward, AdamW step (bf16 autocast if asked; ``foreach``
    as AdamW's: None is PyTorch's choice, the multi-tensor form on CUDA, one parameter at a time on CPU). The
    backward runs outside autocast, as the trainer runs it and as PyTorch's AMP notes ask: on the CPU a backward
    called inside the context runs its ops under autocast too (the engine works in the calling thread), extra casts
    and other dtypes that training never runs (CUDA's engine threads do not inherit the context)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=foreach)
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with _context(precision, idx.device, onednn):
            loss = lm_loss(logits_fn(model, idx), targets)
        loss.backward()
        opt.step()

    return step


def make_graphed_train_step(model: nn.Module, logits_fn: Callable, idx: Tensor, targets: Tensor,
                            lr: float = 3e-4, precision: str = "fp32", warmup: int = 3) -> Callable[[], None]:
    """The same training step as :func:`make_train_step`, captured once as one CUDA graph and replayed
    (PyTorch's "whole-network capture": ``torch.cuda.graph``, AdamW with ``capturable=True``, ``warmup``
    eager steps on a side stream first, gradients set to None before capture so that backward writes
    them in the graph's pool, autocast's cast cache off). A replay launches every kernel of the step
    without the host: what a step costs when the host's launch overhead is gone. Needs CUDA, fixed
    shapes and no host synchronisation inside the step (capture fails with CUDA's error otherwise).
    The capture happens at the first call (so a failing capture fails there, like any step)."""
    if idx.device.type != "cuda":
        raise ValueError(f"a CUDA-graph step needs a CUDA device; got {idx.device.type!r} (allowed: cuda)")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, capturable=True)
    model.train()
    replay: list[Callable[[], None]] = []

    def body() -> None:
        with _context(precision, idx.device, cache=False):
            loss = lm_loss(logits_fn(model, idx), targets)
        loss.backward()
        opt.step()

    def capture() -> Callable[[], None]:
        side = torch.cuda.Stream(idx.device)
        side.wait_stream(torch.cuda.current_stream(idx.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                opt.zero_grad(set_to_none=True)
                body()
        torch.cuda.current_stream(idx.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            body()
        return graph.replay

    def step() -> None:
        if not replay:
            replay.append(capture())
        replay[0]()

    return step


def make_infer_step(model: nn.Module, logits_fn: Callable, idx: Tensor, precision: str = "fp32",
                    onednn: bool = False) -> Callable[[], None]:
    """One inference forward over the whole (B, N) batch, no autograd."""
    model.eval()

    def step() -> None:
        with torch.no_grad(), _context(precision, idx.device, onednn):
            logits_fn(model, idx)

    return step


@torch.no_grad()
def kv_bytes_per_token(model: CausalLM, n_tokens: int, device: torch.device | None = None) -> float:
    """KV-cache bytes per token after a prefill of ``n_tokens`` (batch 1): kv_cache_bytes / n_tokens."""
    device = device or next(model.parameters()).device
    model.eval()
    idx = torch.randint(0, model.cfg.vocab_size, (1, n_tokens), device=device)
    cache: dict = {}
    model(idx, cache=cache)
    return kv_cache_bytes(cache) / n_tokens


def kv_ratio_no_diag(vocab: int = 64, dim: int = 32, layers: int = 2, heads: int = 4, mlp_hidden: int = 64,
                     n_tokens: int = 16) -> tuple[float, float]:
    """(Llama, CEM attention without KQ diagonal) KV bytes per token for a small config."""
    llama = CausalLM(model_config(vocab, dim, layers, heads, mlp_hidden, n_tokens))
    cem = CausalLM(model_config(vocab, dim, layers, heads, mlp_hidden, n_tokens,
                                BlockConfig(attention=CEMAttentionConfig(diagonal="none"))))
    return kv_bytes_per_token(llama, n_tokens), kv_bytes_per_token(cem, n_tokens)


# ----------------------------------------------------------------------------------------- sections
def section_hf(args, device: torch.device) -> None:
    print("\n== 1. Llama baseline vs Hugging Face transformers.LlamaForCausalLM (training step, float32) ==")
    if transformers_version() is None:
        print("transformers is not installed: skipping this section. Install it with:\n    " + INSTALL_HINT)
        return
    cfg = model_config(args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden, args.seq)
    torch.manual_seed(0)
    ours = CausalLM(cfg).to(device)
    hf = hf_llama_from(cfg).to(device)
    p_ours, p_hf = n_params(ours), n_params(hf)
    print(f"parameters: ours {p_ours:,}  HF {p_hf:,}  -> {'match exactly' if p_ours == p_hf else 'DIFFER'}")
    if p_ours != p_hf:
        ours_names = {n: p.numel() for n, p in ours.named_parameters()}
        hf_names = {n: p.numel() for n, p in hf.named_parameters()}
        print("  they differ because the two architectures are not the same; parameter tensors:")
        print(f"  ours: {len(ours_names)} tensors, HF: {len(hf_names)} tensors; "
              f"difference {p_ours - p_hf:+,} (check tied embeddings, biases, intermediate size)")
    else:
        copy_weights_to_hf(ours, hf)
        idx = torch.randint(0, cfg.vocab_size, (2, min(64, args.seq)), device=device)
        ours.eval(), hf.eval()
        with torch.no_grad():
            diff = (ours_logits(ours, idx) - hf_logits(hf, idx)).abs().max().item()
        print(f"weights copied ours -> HF; max |logit difference| on a random batch = {diff:.2e} "
              f"({'same network' if diff < 1e-4 else 'MISMATCH'})")
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=g).to(device)
    x, y = idx[:, :-1], idx[:, 1:]
    steps = {"ours (energyformer)": make_train_step(ours, ours_logits, x, y),
             "HF LlamaForCausalLM": make_train_step(hf, hf_logits, x, y)}
    times = interleaved_times(steps, args.warmup, args.repeats, device)
    med = {n: median(t) for n, t in times.items()}
    tokens = args.batch * args.seq
    print(f"step = zero_grad + forward + cross-entropy + backward + AdamW.step; B={args.batch} N={args.seq}; "
          f"median of {args.repeats} interleaved repeats after {args.warmup} warm-up steps each")
    for n, t in med.items():
        print(f"  {n:22s} {fmt_ms(t)}  {tokens / t:10,.0f} tokens/s  {spread(times[n])}")
    a, b = med["ours (energyformer)"], med["HF LlamaForCausalLM"]
    print(f"  ratio step time ours/HF = {a / b:.3f}  (< 1: ours faster; tokens/s ours/HF = {b / a:.3f})")


def section_cem(args, device: torch.device) -> None:
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(device)
    x, y = idx[:, :-1], idx[:, 1:]
    models = {}
    for name, block in variant_blocks(before=not args.no_before).items():
        torch.manual_seed(0)
        models[name] = CausalLM(model_config(args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden,
                                             args.seq, block)).to(device)
    tokens = args.batch * args.seq
    base = "Llama baseline"
    for precision in args.precisions.split(","):
        print(f"\n== 2. CEM vs Llama baseline at the same width (tokens/s, {precision}"
              f"{' autocast' if precision == 'bf16' else ''}) ==")
        print(f"B={args.batch} N={args.seq} D={args.dim} L={args.layers} H={args.heads} F={args.mlp_hidden} "
              f"V={args.vocab}; {args.repeats} interleaved repeats after {args.warmup} warm-up")
        if precision == args.precisions.split(",")[0]:
            for n, m in models.items():
                print(f"  params {n:44s} {n_params(m):>12,}")
        for kind in ("training step", "inference forward"):
            if kind == "training step":
                fns = {n: make_train_step(m, ours_logits, x, y, precision=precision) for n, m in models.items()}
            else:
                fns = {n: make_infer_step(m, ours_logits, x, precision=precision) for n, m in models.items()}
            times = interleaved_times(fns, args.warmup, args.repeats, device)
            med = {n: median(t) for n, t in times.items()}
            print(f"-- {kind} ({precision})")
            for n, t in med.items():
                r, lo, hi = paired_ratio(times, base, n)
                print(f"  {n:44s} {fmt_ms(t)}  {tokens / t:9,.0f} tok/s  vs Llama {r:.3f} "
                      f"[{lo:.3f}, {hi:.3f}]  {spread(times[n])}")
            for after, before in (("full CEM (T=1)", "before: full CEM (T=1), fused path"),
                                  ("full CEM (T=2, D+LR precond)", "before: full CEM (T=2, D+LR), fused path")):
                if before in times:
                    r, lo, hi = paired_ratio(times, before, after)
                    print(f"  speed-up of the blocked path over the fused path, {after}: x{r:.2f} [{lo:.2f}, {hi:.2f}]")
    print("  (ratio = tokens/s of the variant / tokens/s of the Llama baseline, per repeat; median [min, max])")


def section_onednn(args, device: torch.device) -> None:
    available = _onednn().available

    print("\n== 4. float32 training step: nn.Linear through oneDNN vs MKL (benchmarks/onednn.py) ==")
    if device.type != "cpu" or not available():
        print("not a CPU run or no oneDNN linear in this build: skipped")
        return
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=g).to(device)
    x, y = idx[:, :-1], idx[:, 1:]
    fns = {}
    for name, block in variant_blocks().items():
        for dnn in (False, True):
            torch.manual_seed(0)
            m = CausalLM(model_config(args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden,
                                      args.seq, block)).to(device)
            fns[(name, dnn)] = make_train_step(m, ours_logits, x, y, onednn=dnn)
    times = interleaved_times(fns, args.warmup, args.repeats, device)
    for name in variant_blocks():
        r = [a / b for a, b in zip(times[(name, False)], times[(name, True)])]
        print(f"  {name:44s} MKL {fmt_ms(median(times[(name, False)]))}  oneDNN "
              f"{fmt_ms(median(times[(name, True)]))}  speed-up x{median(r):.2f} [{min(r):.2f}, {max(r):.2f}]")


def section_kv(args, device: torch.device) -> None:
    print(f"\n== 3. KV-cache bytes per token after a prefill of N={args.seq} tokens (batch 1, float32) ==")
    variants = {
        "Llama (K and V)": BlockConfig(),
        "CEM attn, no KQ diagonal (tied keys)": BlockConfig(attention=CEMAttentionConfig(diagonal="none")),
        "CEM attn, shared diagonal (default)": BlockConfig(attention="cem"),
        "full CEM T=1, default": BlockConfig(attention="cem", mlp="cem"),
    }
    res = {}
    for name, block in variants.items():
        torch.manual_seed(0)
        m = CausalLM(model_config(args.vocab, args.dim, args.layers, args.heads, args.mlp_hidden,
                                  args.seq, block)).to(device)
        res[name] = kv_bytes_per_token(m, args.seq, device)
    base = res["Llama (K and V)"]
    unit = args.layers * args.dim * 4  # one float32 vector of width D per layer
    for name, b in res.items():
        print(f"  {name:38s} {b:10,.0f} B/token  = {b / unit:.2f} x (L·D floats)   ratio vs Llama = {b / base:.3f}")
    print("  no diagonal: the cache holds only the tied keys k = W_K h (W_V = W_K), one D-wide tensor per "
          "layer -> 1/2 of Llama's K+V.")
    print("  shared/per-head diagonal: the diagonal term d∘h_j enters scores and values, so the normalised "
          "inputs h (another D floats per token per layer) are cached too -> the same size as Llama's cache.")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pos = _page.positive_int
    ap.add_argument("--vocab", type=pos, default=4096)
    ap.add_argument("--dim", type=pos, default=256)
    ap.add_argument("--layers", type=pos, default=4)
    ap.add_argument("--heads", type=pos, default=8)
    ap.add_argument("--mlp-hidden", type=pos, default=704, help="SwiGLU / CEM MLP hidden size")
    ap.add_argument("--batch", type=pos, default=8)
    ap.add_argument("--seq", type=pos, default=256)
    ap.add_argument("--repeats", type=pos, default=7, help="timed repeats per model (median reported)")
    ap.add_argument("--warmup", type=_page.nonneg_int, default=2, help="untimed steps per model before timing")
    ap.add_argument("--threads", type=_page.nonneg_int, default=0, help="torch.set_num_threads (0 = all cores)")
    ap.add_argument("--sections", type=_page.comma_choices("section", ("1", "2", "3", "4")), default="1,2,3",
                    help="comma-separated subset of sections 1, 2, 3, 4 to run (4: oneDNN)")
    ap.add_argument("--precisions", type=_page.precisions, default="fp32,bf16",
                    help="section 2: fp32 and/or bf16 (autocast)")
    ap.add_argument("--no-before", action="store_true", help="section 2: skip the fused-path 'before' rows")
    ap.add_argument("--render-only", type=Path, metavar="DIR",
                    help="measure nothing: write DIR/benchmarks.md (docs/results/cem) from the committed outputs "
                         "DIR/bench_lm_throughput.txt and DIR/bench_cem_attention.txt")
    args = ap.parse_args(argv)
    if args.render_only:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _cem_page import page

        (args.render_only / "benchmarks.md").write_text(page(args.render_only).rstrip() + "\n")
        return

    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    device = pick_device()
    print(_page.header(device))
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    print(f"device: {device} ({dev_name}); torch {torch.__version__}; "
          f"transformers {transformers_version() or 'not installed'}; torch threads {torch.get_num_threads()} "
          f"(cores {os.cpu_count()}); python {platform.python_version()}")
    if device.type == "cpu" and hasattr(os, "getloadavg"):
        load = os.getloadavg()[0]
        print(f"1-min load average before the run: {load:.2f} on {os.cpu_count()} cores")
        if load > 0.5 and threads > 1:
            print("WARNING: other processes are using the CPU; multi-threaded timings can be badly inflated "
                  "by thread contention (try --threads 1 and compare); medians below are still from one run.")
    sections = set(args.sections.split(","))
    t0 = time.perf_counter()
    if "1" in sections:
        section_hf(args, device)
    if "2" in sections:
        section_cem(args, device)
    if "3" in sections:
        section_kv(args, device)
    if "4" in sections:
        section_onednn(args, device)
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    _page.run(main)
