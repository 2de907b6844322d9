"""Export a trained run to other tools' formats: ``energyformer export RUN --format hf OUT``.

``hf``: a Hugging Face model folder (:mod:`energyformer.export.hf`); :func:`load_hf` reads it back.
"""

from __future__ import annotations

from pathlib import Path

from .hf import ExportError, export_hf, load_hf

FORMATS = ("hf",)


def export_run(run_dir: str | Path, out: str | Path, format: str = "hf", overwrite: bool = False
               ) -> tuple[Path, str]:
    """Export the newest valid checkpoint of ``run_dir`` to ``out`` in ``format`` (see :data:`FORMATS`); ``out``
    must be a new or empty folder, or an earlier export with ``overwrite``. Returns ``out`` and which checkpoint
    was exported ("checkpoint step N", with a note when newer invalid ones were skipped); the exported
    ``config.json`` records its step (``energyformer_checkpoint_step``)."""
    from ..experiment import load_trained
    from ..train import checkpoint_step
    from ..utils.config import to_dict

    if format not in FORMATS:
        raise ExportError(f"--format {format!r}: allowed formats: {', '.join(FORMATS)}")
    cfg, model, task = load_trained(run_dir)
    step = checkpoint_step(task.checkpoint)
    path = export_hf(model, out, tokenizer=getattr(task, "tokenizer", None), run_config=to_dict(cfg),
                     overwrite=overwrite, checkpoint_step=step)
    return path, f"checkpoint step {step}{task.checkpoint_note}"


__all__ = ["FORMATS", "ExportError", "export_hf", "export_run", "load_hf"]
