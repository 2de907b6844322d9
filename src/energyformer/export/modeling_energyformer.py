"""Hugging Face wrapper of an energyformer language model (copied into every exported folder).

``transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`` loads this file
from the folder. It builds the model with the installed ``energyformer`` package (the energy, solver
and block code is the library itself, not a copy), from the model config stored under
``energyformer_model`` in ``config.json``; the weights are the library's own ``state_dict`` under the
prefix ``model.``. The forward pass is the library's ``model(input_ids).logits``; ``generate()``
recomputes the whole window at each step (no Hugging Face KV cache), so it gives exactly the tokens
of ``energyformer``'s own greedy generation. A model using a plugin's kinds lists its plugins under
``energyformer_plugins``: they are imported first (a single-file plugin from the folder's ``plugins/``, a package
plugin by name, which must then be importable here), else loading stops with one line naming the plugin.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast


class EnergyformerConfig(PretrainedConfig):
    """``config.json`` of an exported model: the energyformer model config plus the HF fields."""

    model_type = "energyformer"

    def __init__(self, energyformer_model: dict | None = None, energyformer_plugins: list | None = None, **kwargs):
        self.energyformer_model = dict(energyformer_model or {})
        self.energyformer_plugins = list(energyformer_plugins or [])
        kwargs.setdefault("use_cache", False)
        super().__init__(**kwargs)


class EnergyformerForCausalLM(PreTrainedModel, GenerationMixin):
    """``energyformer.models.CausalLM`` behind the ``PreTrainedModel`` interface (logits, loss, generate)."""

    config_class = EnergyformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _supports_cache_class = False

    def __init__(self, config: EnergyformerConfig):
        super().__init__(config)
        from energyformer.export.hf import build_lm, load_export_plugins

        load_export_plugins(getattr(config, "energyformer_plugins", None), getattr(config, "name_or_path", None))
        self.model = build_lm(config.energyformer_model)
        self.post_init()

    def _init_weights(self, module):  # the library initialises its own modules
        pass

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """``PreTrainedModel.from_pretrained``, then the non-persistent buffers (ALiBi slopes, position
        tables, ...) recomputed by the library: they are not in the weights, and Hugging Face builds the
        model on the meta device, so they would be left uninitialised."""
        model = super().from_pretrained(*args, **kwargs)
        fresh = type(model.model)(model.model.cfg)
        saved = set(fresh.state_dict())
        device = next(model.parameters()).device
        for name, buf in fresh.named_buffers():
            if name not in saved:
                owner, _, attr = name.rpartition(".")
                model.model.get_submodule(owner)._buffers[attr] = buf.to(device)
        return model

    def get_input_embeddings(self):
        return self.model.embed

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> CausalLMOutputWithPast:
        """input_ids: (B, N); attention_mask: (B, N), 1 = real token (padded keys are hidden)."""
        mask = None if attention_mask is None or bool(attention_mask.all()) else attention_mask.bool()
        logits = self.model(input_ids, mask=mask).logits  # (B, N, V)
        loss = None
        if labels is not None:  # HF convention: labels are the inputs, shifted here
            loss = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                                      **kwargs) -> dict:
        n = self.model.cfg.max_seq_len  # the generation window of the library's own generate()
        mask = None if attention_mask is None else attention_mask[:, -n:]
        return {"input_ids": input_ids[:, -n:], "attention_mask": mask}
