"""One command per paper result: ``energyformer reproduce NAME [ARGS...]``.

Each reproduction is a module with ``main(argv) -> int`` and its own ``--help``; it is registered here
by name with a one-line description, and imported only when run (so ``--help`` stays fast). A name with
a study file ``studies/NAME.yaml`` runs that study (:mod:`energyformer.studies.command`) instead, and so does the
path of a study file of your own (``energyformer reproduce my_study.yaml``: :func:`resolve`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Reproduction:
    name: str
    module: str        # import path of a module with main(argv) -> int
    description: str

    def main(self) -> Callable[[list[str]], int]:
        from ..studies import study_path

        if study_path(self.name) is not None:
            from functools import partial

            from ..studies.command import main

            return partial(main, self.name)
        return importlib.import_module(self.module).main


REPRODUCTIONS: dict[str, Reproduction] = {}


def resolve(which: str) -> Callable[[list[str]], int]:
    """``main(argv)`` of ``energyformer reproduce WHICH``: a registered reproduction, a study of the library's
    ``studies/`` folder by name, or the path of a study file (``.yaml``; format: docs/studies.md). Anything else is
    a one-line ConfigError naming what is allowed."""
    from functools import partial

    from ..studies import known_studies, study_path
    from ..utils.validate import ConfigError

    if which in REPRODUCTIONS:
        return REPRODUCTIONS[which].main()
    from ..studies.command import main
    from ..studies.preflight import is_study_path

    if is_study_path(which):
        if not Path(which).is_file():
            raise ConfigError(f"reproduce {which!r}: no such study file")
        return partial(main, which)
    if study_path(which) is not None:
        return partial(main, which)
    others = [s for s in known_studies() if s not in REPRODUCTIONS]
    raise ConfigError(f"reproduce {which!r}: allowed {', '.join(REPRODUCTIONS)}"
                      + (f", the studies {', '.join(others)}" if others else "")
                      + " or the path of a study file (NAME.yaml; docs/studies.md)")


def register_reproduction(name: str, module: str, description: str) -> None:
    if name in REPRODUCTIONS:
        raise ValueError(f"reproduction {name!r} is already registered ({REPRODUCTIONS[name].module})")
    REPRODUCTIONS[name] = Reproduction(name, module, description)


register_reproduction("cem-lm", "energyformer.studies.command",
                      "CEM seed §4: Llama vs CEM language models (configs × learning rates; --only picks a suite)")
register_reproduction("cem-gp", "energyformer.studies.command",
                      "CEM seed Table 3: Plain / Gated / CEM-T{1,2,4,8} on GP regression")
register_reproduction("hyperset-sudoku", "energyformer.studies.command",
                      "Hyper-SET seed §5.1: Hyper-SET vs the looped transformer on Sudoku, test-time extrapolation")
register_reproduction("intrinsic-lm", "energyformer.studies.command",
                      "Intrinsic-optimizer seed §4: MHA vs MomenMHA, NagMHA, MHA2nd1st(+simplified), MHA2nd-lite LMs")
register_reproduction("bare-sa", "energyformer.studies.command",
                      "seed 004: recycled transformer vs bare self-attention trained by pseudo-likelihood (Potts MLM, denoising)")
register_reproduction("hyperset-images", "energyformer.studies.command",
                      "Hyper-SET seed §5.2: Hyper-SET vs Transformer / ET / CRATE(-T) on images, Tables 1, 4, 5, Fig. 4")
register_reproduction("eqt", "energyformer.studies.command",
                      "EqT seed 003 §4: baseline vs equilibrium transformer on cumulative parity (Table 2), convergence, overheads")
