"""Hugging Face model folders: ``energyformer export RUN --format hf OUT`` and the way back.

Two layouts, both loadable offline with ``AutoModelForCausalLM.from_pretrained(OUT, trust_remote_code=True)``:

* **Llama baseline** (attention ``llama``, MLP ``swiglu``, RMS final norm, no absolute positions, one
  pass): a stock ``LlamaForCausalLM`` folder (``model_type: llama``, HF weight names). The layouts are
  the same (separate Q/K/V/O and gate/up/down ``Linear`` weights, RMSNorm eps 1e-6, RoPE rotating
  (first half, second half) with the same θ), so the weights are renamed, never transformed. Past
  ``max_seq_len`` its ``generate()`` keeps extending RoPE positions (transformers warns), where energyformer's
  ``generate`` (and the custom-code layout) slide a window of the last ``max_seq_len`` tokens: the same tokens
  up to that length, not beyond (the README says so).
* **every other language model** (CEM, the intrinsic-optimizer attentions, GPT, ...): custom code. The
  folder holds ``modeling_energyformer.py`` (``auto_map`` in ``config.json``), which builds the model
  with the *installed* ``energyformer`` package from the model config stored in ``config.json``
  (``energyformer_model``); the weights are the library's ``state_dict`` under ``model.``. So loading
  needs ``pip install energyformer`` (the energies, solvers and blocks are the library, not a copy).
  A model that uses a plugin's kinds (``--plugin``, :func:`energyformer.plugins.import_plugins`) records its
  plugins in ``config.json`` (``energyformer_plugins``) and the modelling code imports them before building the
  model: a single-file plugin is copied into the folder (``plugins/NAME.py``), so the folder loads anywhere
  energyformer is installed; a package plugin (``mylab.energies``) must be importable where the folder is loaded.

Export checks itself: the exported folder is loaded back with ``transformers`` and its logits on a
fixed probe must equal the run's to 1e-5, else the export fails. With plugins that load happens in a fresh
Python process (in the process that exported, the plugin is registered already and a folder that cannot
register it would pass), after every kind defined outside the package is checked to come from a recorded
plugin. The run's tokenizer goes with it as
``tokenizer.json`` (a ``PreTrainedTokenizerFast`` that ``AutoTokenizer`` loads offline, with the ``tokenizers``
library alone) for every energyformer tokenizer: ``bpe`` and ``gpt2`` (their BPE as is), ``bytes`` (a byte-level
model built to the same ids) and ``llama`` (the SentencePiece BPE converted): :mod:`.hf_tokenizer`, which writes
one only once it encodes and decodes probe texts exactly as the run's own. Where it writes none (another
tokenizer class, a SentencePiece model that does not convert) the export prints one line saying so, so that
nobody expects ``AutoTokenizer`` to load the folder. :func:`load_hf` reads either layout back into an
``energyformer`` ``CausalLM``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..data.text import note
from ..errors import UserError
from ..models import CausalLM, ModelConfig
from ..utils.config import load_config, to_dict
from .folder import MARKER, MARKER_VERSION, export_folder
from .hf_tokenizer import write_hf_tokenizer

MODELING_FILE = Path(__file__).with_name("modeling_energyformer.py")
WEIGHTS = "model.safetensors"
PROBE_TOL = 1e-5

#: our state_dict name -> HF Llama name ({i}: layer index)
_LLAMA_NAMES = {
    "embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight", "head.weight": "lm_head.weight",
    "layers.{i}.attn.norm.weight": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.attn.wq.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.attn.wk.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.attn.wv.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.attn.wo.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.mlp.norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.mlp.w_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.mlp.w_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.mlp.w_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}


class ExportError(UserError):
    """The run cannot be exported in this format (the message says why and what can)."""


def build_lm(model_config: dict) -> CausalLM:
    """A freshly built ``CausalLM`` from a (resolved) ``transformer`` model config dict."""
    return CausalLM(load_config(ModelConfig, model_config))


def is_llama(cfg: ModelConfig) -> bool:
    """Whether ``cfg`` is the Llama baseline that maps onto a stock ``LlamaForCausalLM``."""
    b = cfg.block
    return (b.attention.kind == "llama" and b.attention.rope and b.mlp.kind == "swiglu"  # stock Llama always has RoPE
            and cfg.positions == "none"
            and cfg.final_norm == "rms" and cfg.iterations == 1 and cfg.train_iterations is None
            and to_dict(b) == to_dict(type(b)(attention=b.attention, mlp=b.mlp)))


def _llama_name_map(n_layers: int) -> dict[str, str]:
    out = {}
    for ours, hf in _LLAMA_NAMES.items():
        for i in range(n_layers) if "{i}" in ours else [None]:
            out[ours.format(i=i)] = hf.format(i=i)
    return out


def llama_config(cfg: ModelConfig) -> dict:
    """``config.json`` of the stock HF Llama with the architecture of ``cfg``."""
    from transformers import LlamaConfig

    from ..blocks.baselines import RMS_EPS

    tied = cfg.tie_embeddings is not False  # None: tied, as the LM head predicts the vocabulary
    hf = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.hidden,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
        max_position_embeddings=cfg.max_seq_len, rms_norm_eps=RMS_EPS, rope_theta=cfg.block.attention.rope_theta,
        tie_word_embeddings=tied, attention_bias=False, mlp_bias=False, hidden_act="silu",
        initializer_range=cfg.init_std, architectures=["LlamaForCausalLM"], torch_dtype="float32")
    return hf.to_dict()


def _tensors(model: nn.Module, rename: dict[str, str] | None = None, prefix: str = "") -> dict[str, torch.Tensor]:
    """The state_dict as contiguous CPU float tensors (shared tensors copied: safetensors stores each once)."""
    out = {}
    for k, v in model.state_dict().items():
        name = rename[k] if rename is not None else prefix + k
        out[name] = v.detach().to("cpu").contiguous().clone()
    return out


def export_hf(model: CausalLM, out: str | Path, *, tokenizer: Any = None, run_config: dict | None = None,
              check: bool = True, overwrite: bool = False, checkpoint_step: int | None = None) -> Path:
    """Write ``model`` as a Hugging Face folder ``out`` (see the module docstring); returns ``out``.

    ``out`` must be new or empty, or an earlier export with ``overwrite`` (:func:`~.folder.export_folder`:
    written beside it and moved into place once checked). ``run_config`` and ``checkpoint_step`` (the run's
    config and the step of the checkpoint the weights come from) are recorded in ``config.json``."""
    if not isinstance(model, CausalLM):
        raise ExportError(f"--format hf exports causal language models (task lm); this run's model is a "
                          f"{type(model).__name__}")
    with export_folder(out, overwrite, ExportError) as stage:
        why = _write(model, stage, tokenizer, run_config, check, checkpoint_step)
    if why is not None:
        name = getattr(tokenizer, "name", type(tokenizer).__name__)
        note(f"no tokenizer written: the {name} tokenizer has no Hugging Face form here ({why}); AutoTokenizer "
             f"will not load {out}; tokenise with energyformer's own tokenizer "
             f"(energyformer.data.tokenizers.get_tokenizer, as the run's task.tokenizer says)")
    return Path(out)


def _write(model: CausalLM, out: Path, tokenizer: Any, run_config: dict | None, check: bool,
           checkpoint_step: int | None) -> str | None:
    """Write the folder into ``out``; None, or why the run's ``tokenizer`` was not written (see
    :func:`.hf_tokenizer.write_hf_tokenizer`)."""
    cfg: ModelConfig = model.cfg
    model = copy.deepcopy(model).float().eval()  # the caller's model keeps its dtype and mode
    if is_llama(cfg):
        config = llama_config(cfg)
        names = _llama_name_map(cfg.n_layers)
        tensors = _tensors(model, names)
        if config["tie_word_embeddings"]:
            tensors.pop("lm_head.weight")
    else:
        config = {"architectures": ["EnergyformerForCausalLM"], "model_type": "energyformer",
                  "auto_map": {"AutoConfig": "modeling_energyformer.EnergyformerConfig",
                               "AutoModelForCausalLM": "modeling_energyformer.EnergyformerForCausalLM"},
                  "energyformer_model": to_dict(cfg), "vocab_size": cfg.vocab_size, "torch_dtype": "float32",
                  "use_cache": False}
        tensors = _tensors(model, prefix="model.")
        shutil.copyfile(MODELING_FILE, out / MODELING_FILE.name)
        plugins = _export_plugins(cfg, out)
        if plugins:
            config["energyformer_plugins"] = plugins
    why = None
    if tokenizer is not None:
        config["eos_token_id"] = tokenizer.eos_id
        why = write_hf_tokenizer(tokenizer, out)
    if run_config is not None:
        config["energyformer_run"] = run_config
    if checkpoint_step is not None:
        config["energyformer_checkpoint_step"] = checkpoint_step
    config[MARKER] = MARKER_VERSION
    (out / "config.json").write_text(json.dumps(config, indent=1))
    generation = {"use_cache": False, "eos_token_id": config.get("eos_token_id")}
    (out / "generation_config.json").write_text(json.dumps(generation))
    save_file(tensors, str(out / WEIGHTS), metadata={"format": "pt"})
    if check:
        if config.get("energyformer_plugins"):  # in this process the plugins are registered: load it in a new one
            check_export(model, out, fresh_process=True)
        else:
            check_export(model, out)
    return why


PLUGIN_DIR = "plugins"


def _export_plugins(cfg: ModelConfig, out: Path) -> list[dict[str, str]]:
    """The plugins the model needs (:func:`energyformer.plugins.run_plugins`), as ``config.json`` records them:
    ``{"module": name}``, plus ``"file": "plugins/NAME.py"`` for a single-file module, copied into ``out``. Every
    kind the model config uses that is defined outside the package must come from one of them."""
    from ..plugins import covered, foreign_kinds, run_plugins

    plugins = run_plugins(cfg)
    for key, kind, module in foreign_kinds(cfg):
        if not covered(module, plugins):
            raise ExportError(f"model.{key} = {kind!r} is defined in {module!r}, which no plugin module imports (a "
                              f"kind defined in the script being run cannot be exported: move it to a module and "
                              f"give --plugin MODULE or --plugin FILE.py)")
    records = []
    for rec in plugins:
        file = getattr(sys.modules.get(rec["module"]), "__file__", None)
        if "." not in rec["module"] and file and Path(file).suffix == ".py" and Path(file).name != "__init__.py":
            (out / PLUGIN_DIR).mkdir(exist_ok=True)
            shutil.copyfile(file, out / PLUGIN_DIR / f"{rec['module']}.py")
            records.append({"module": rec["module"], "file": f"{PLUGIN_DIR}/{rec['module']}.py"})
        else:
            records.append({"module": rec["module"]})
    return records


def load_export_plugins(plugins: list[dict[str, str]] | None, folder: str | os.PathLike | None) -> None:
    """Import the plugins an exported folder records (``energyformer_plugins`` in its ``config.json``) before its
    model is built (the modelling code calls this): a module already imported is kept, a copied file
    (``folder/plugins/NAME.py``) is imported from the folder, else the module by name. One that does not import
    is a one-line ``ImportError`` naming it and what to do."""
    from ..plugins import RecordedPluginError, import_recorded

    try:
        import_recorded(plugins or [], Path(folder) if folder else None)
    except RecordedPluginError as failed:
        rec = failed.record
        where = f" (its copy {rec['file']} is not in {folder})" if rec.get("file") and folder else ""
        raise ImportError(f"this energyformer model needs its plugin module {rec['module']!r}{where}: {failed.error}; "
                          f"make the module importable (PYTHONPATH or pip install) where the model is loaded") from None


def export_message(run: str, out: str | Path, which: str, fmt: str) -> str:
    """The line ``energyformer export`` prints: where the folder went, how it loads, what it needs."""
    out = Path(out)
    config = json.loads((out / "config.json").read_text())
    # AutoTokenizer loads the folder only where the export wrote tokenizer.json (else export_hf said why on stderr);
    # a custom-code folder (auto_map) needs trust_remote_code there too, else transformers asks on the terminal
    trust = ", trust_remote_code=True" if config.get("auto_map") else ""
    tok = (f"; its tokenizer with transformers.AutoTokenizer.from_pretrained({str(out)!r}{trust})"
           if (out / "tokenizer.json").is_file() else "; no tokenizer.json (see the note above)")
    plugins = config.get("energyformer_plugins") or []
    copied = [p["module"] for p in plugins if p.get("file")]
    needed = [p["module"] for p in plugins if not p.get("file")]
    needs = ((f"; plugin file(s) {', '.join(copied)} copied into {out / PLUGIN_DIR}" if copied else "")
             + (f"; plugin module(s) {', '.join(needed)} must be importable where it is loaded" if needed else ""))
    return (f"exported {run} ({which}) to {out} ({fmt}; loads with transformers.AutoModelForCausalLM."
            f"from_pretrained({str(out)!r}, trust_remote_code=True){tok}{needs})")


def _probe(cfg: ModelConfig) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, cfg.vocab_size, (2, min(cfg.max_seq_len, 12)), generator=g)  # (2, N)


_FRESH_LOAD = """import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True, local_files_only=True).eval()
with torch.no_grad():
    torch.save(m(input_ids=torch.load(sys.argv[2])).logits.float(), sys.argv[3])
"""


def _fresh_logits(out: Path, idx: torch.Tensor) -> torch.Tensor:
    """The exported folder's logits on ``idx``, loaded by ``transformers`` in a new Python process started in an
    empty folder (so a plugin importable only from here, or registered only in this process, does not count)."""
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(idx, Path(tmp) / "idx.pt")
        proc = subprocess.run([sys.executable, "-c", _FRESH_LOAD, str(Path(out).resolve()), "idx.pt", "logits.pt"],
                              cwd=tmp, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            raise ExportError(f"export check failed: {out} does not load in a fresh Python process "
                              f"({lines[-1] if lines else f'exit status {proc.returncode}'})")
        return torch.load(Path(tmp) / "logits.pt")


@torch.no_grad()
def check_export(model: CausalLM, out: Path, fresh_process: bool = False) -> float:
    """Load ``out`` with ``transformers`` (in a new Python process with ``fresh_process``) and compare logits on a
    probe; the max difference (<= 1e-5)."""
    idx = _probe(model.cfg)
    if fresh_process:
        logits = _fresh_logits(out, idx)
    else:
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True, local_files_only=True).eval()
        logits = hf(input_ids=idx).logits
    diff = float((logits.float() - model(idx).logits.float()).abs().max())
    if not diff <= PROBE_TOL:
        raise ExportError(f"export check failed: the Hugging Face model in {out} gives logits {diff:.3g} away "
                          f"from the run's (tolerance {PROBE_TOL:g})")
    return diff


def load_hf(folder: str | Path) -> CausalLM:
    """An exported folder (either layout) back as an ``energyformer`` ``CausalLM`` in eval mode."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ExportError(f"{folder / 'config.json'} not found: is {folder} an exported model folder?")
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") not in ("energyformer", "llama"):
        raise ExportError(f"{folder}: model_type {config.get('model_type')!r} is not an energyformer export "
                          f"(allowed: 'energyformer', 'llama')")
    tensors = load_file(str(folder / WEIGHTS))
    if config.get("model_type") == "energyformer":
        load_export_plugins(config.get("energyformer_plugins"), folder)
        model = build_lm(config["energyformer_model"])
        state = {k.removeprefix("model."): v for k, v in tensors.items()}
    else:
        cfg = load_config(ModelConfig, {
            "vocab_size": config["vocab_size"], "dim": config["hidden_size"], "n_layers": config["num_hidden_layers"],
            "heads": config["num_attention_heads"], "mlp_hidden": config["intermediate_size"],
            "max_seq_len": config["max_position_embeddings"], "tie_embeddings": config["tie_word_embeddings"],
            "init_std": config.get("initializer_range", 0.02),
            "block": {"attention": {"kind": "llama", "rope_theta": _rope_theta(config)}, "mlp": "swiglu"}})
        model = CausalLM(cfg)
        back = {hf: ours for ours, hf in _llama_name_map(cfg.n_layers).items()}
        state = {back[k]: v for k, v in tensors.items()}
        if cfg.tie_embeddings and "head.weight" not in state:
            state["head.weight"] = state["embed.weight"]
    model.load_state_dict(state, strict=True)
    return model.eval()


def _rope_theta(config: dict) -> float:
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
