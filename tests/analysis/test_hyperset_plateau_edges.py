"""hyperset_plateau page logic at an edge the plateau page tests leave open: the first step at or below a loss
counts training steps only (step 0 is the untrained model's probe, never an "exit")."""

from energyformer.analysis.hyperset_plateau import _first_at_or_below


class _Runs:  # the two lookups _first_at_or_below reads of hyperset_plateau.Runs
    def __init__(self, losses):
        self.losses = losses

    def steps(self, run):
        return sorted(self.losses)

    def at(self, run, step, field):
        return self.losses[step]


def test_step_zero_is_never_the_first_step_at_or_below():
    r = _Runs({0: 1.0, 100: 2.5, 200: 1.5})
    assert _first_at_or_below(r, "x", 2.0) == 200
    assert _first_at_or_below(r, "x", 0.5) is None
