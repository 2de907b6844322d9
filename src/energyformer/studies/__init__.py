"""Studies (issue 22): a reproduction is data — ``studies/<name>.yaml`` (configs × grid × seeds × scales,
metrics and claims with declared rules) run by one runner on ``experiment.run_experiment``.

:mod:`.spec` (the typed study file), :mod:`.plan` (grid expansion), :mod:`.runner` (reuse, resume, ``--jobs``),
:mod:`.claims` (verdicts by the declared rules), :mod:`.command` (``energyformer reproduce NAME``).
Format: ``docs/studies.md``.
"""

from .plan import RunPlan, expand
from .spec import StudySpec, known_studies, load_study, studies_dir, study_path

__all__ = ["RunPlan", "StudySpec", "expand", "known_studies", "load_study", "studies_dir", "study_path"]
