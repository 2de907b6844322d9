"""Hyper-SET Sudoku claims by declared rules: every verdict each rule can reach, on the committed
results.json edited in memory (nothing is trained), and the paper constants traced to their source."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from energyformer.analysis.sudoku_claims import ACC_BOUND, PAPER, claim_rows, plateau_exit

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "hyperset" / "results.json"


@pytest.fixture(scope="module")
def base() -> dict:
    return json.loads(RESULTS.read_text())


def _row(res: dict, start: str) -> list[str]:
    return next(r for r in claim_rows(res, res["models"]["Hyper-SET"]["L"]) if r[0].startswith(start))


def test_paper_constants_come_from_the_released_fig3b_arrays():
    assert PAPER["Hyper-SET"]["board_2L"] == 57.23 and PAPER["Transformer"]["board_2L"] == 51.2
    assert math.isclose(ACC_BOUND, 2.3)


@pytest.mark.parametrize("hs, tf, verdict", [(0.0, 0.0, "UNTESTABLE"), (60.0, 50.0, "HOLDS"),
                                             (50.0, 60.0, "DOES NOT HOLD"), (51.0, 50.0, "UNDECIDED")])
def test_board_accuracy_at_l(base, hs, tf, verdict):
    res = copy.deepcopy(base)
    res["models"]["Hyper-SET"]["board_L"], res["models"]["Transformer"]["board_L"] = hs, tf
    row = _row(res, "§5.1: Hyper-SET beats")
    assert row[1].startswith(verdict) and "bound 2.3 points" in row[2] and "54.70 vs 49.30" in row[4]


@pytest.mark.parametrize("hs_step, tf_step, verdict", [(1000, 3000, "HOLDS"), (3000, 1000, "DOES NOT HOLD"),
                                                       (2000, 2000, "UNDECIDED"), (None, None, "UNTESTABLE"),
                                                       (None, 1000, "DOES NOT HOLD")])
def test_fig3a_plateau_exit(base, hs_step, tf_step, verdict):
    res = copy.deepcopy(base)
    for name, step in (("Hyper-SET", hs_step), ("Transformer", tf_step)):
        res["models"][name]["eval_history"] = [
            {"step": s, "eval/cell_accuracy": 0.5 if step is not None and s >= step else 0.11}
            for s in range(1000, 7000, 1000)]
    assert plateau_exit(res["models"]["Hyper-SET"]["eval_history"]) == hs_step
    assert _row(res, "Fig. 3a")[1].startswith(verdict)


def test_the_committed_run_reads_untestable_and_fig3a_fails(base):
    assert _row(base, "§5.1").__getitem__(1).startswith("UNTESTABLE")
    assert _row(base, "Fig. 3a")[1].startswith("DOES NOT HOLD")   # transformer at 1000, Hyper-SET at 3000


def test_energy_rows_follow_every_step(base):
    res = copy.deepcopy(base)
    t = res["models"]["Hyper-SET"]["trajectory"]
    L = res["models"]["Hyper-SET"]["L"]
    t["e_total"] = [10.0] + [float(9 - 0.1 * i) for i in range(2 * L)]
    assert _row(res, "Fig. 5: E_ATTN + E_FF decreases")[1] == "HOLDS"
    t["e_total"][3] = 100.0   # one rise inside x¹ … x^L
    assert _row(res, "Fig. 5: E_ATTN + E_FF decreases")[1] == "DOES NOT HOLD"
