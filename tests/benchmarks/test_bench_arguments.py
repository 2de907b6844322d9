"""Benchmark scripts refuse what they cannot honour and say what they skip, at tiny sizes (probe K, B1-B5).

Old behaviour, per test: ``--precisions fp16`` ran float32 and printed "fp16" headings; hyperset_attention's memory
ratio of 0-byte readings was 0.00x "met" (0/0) or 12288x (a 1-byte divisor); bare_sa.py ignored a ``--results``
path that did not exist (and its default was relative to the working directory); ``--sections 5`` ran nothing with
exit 0; a requested mha2nd row beyond ``--mha2nd-max-ctx`` vanished; ``--quick`` overwrote explicit values;
``--batch 0`` was measured; eqt.py's failed worker ended in a JSONDecodeError traceback.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from energyformer.errors import ConfigError

from .bench_script import load_bench

ROOT = Path(__file__).resolve().parents[2]
LM = ["--vocab", "16", "--dim", "32", "--layers", "1", "--heads", "2", "--mlp-hidden", "32", "--batch", "1",
      "--seq", "4", "--repeats", "1", "--warmup", "0", "--threads", "1"]


def _refused(main, argv, capsys, *words):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    return err


# ------------------------------------------------------------------------------------------------ B1
def test_unknown_precision_is_refused_by_every_precisions_option(capsys):
    lm = load_bench("lm_throughput")
    _refused(lm.main, [*LM, "--sections", "3", "--precisions", "fp16"], capsys,
             "--precisions", "'fp16'", "bf16, fp32")
    _refused(load_bench("cem_attention").main, ["--skip-timing", "--skip-memory", "--precisions", "fp32,bogus"],
             capsys, "--precisions", "'bogus'", "bf16, fp32")
    _refused(load_bench("activation_bytes").main, ["--precisions", "fp32,fp16"], capsys, "'fp16'")
    _refused(load_bench("host_time").main, ["--precisions", "fp16"], capsys, "'fp16'")
    with pytest.raises(ConfigError, match="fp16"):  # the shared context never treats a name it lacks as fp32
        lm._context("fp16", lm.pick_device())


# ------------------------------------------------------------------------------------------------ B2
def test_hyperset_memory_ratio_below_resolution_is_na_without_verdict(monkeypatch, capsys):
    ha = load_bench("hyperset_attention")
    readings = {"fused": 0, "einsum": 0}
    monkeypatch.setattr(ha, "peak_memory", lambda v, n, backward: readings[v] if not backward else 12 * 2**20)
    rows = ha.bench_attention(1, [16])      # fwd: 0 vs 0 bytes; fwd+bwd: 12 MiB vs 12 MiB
    out = capsys.readouterr().out
    assert rows[0]["mem_ratio"] is None and rows[1]["mem_ratio"] == 1.0
    assert "= n/a" in out and "0.00x" not in out.split("\n")[0]
    meta = {"threads": 1, "torch": "x", "cpus": 2, "nice": 0, "command": "c"}
    sud = {"meta": meta, "settings": {"n": 1, "reps": 1, "climb_steps": 1, "max_grids": 1, "solver_puzzles": 1},
           "generation": [], "solver": {}}
    text = ha.page({"meta": meta, "repeats": 1, "attention": rows, "training": None}, sud)
    targets = next(line for line in text.splitlines() if line.startswith("**Targets.**"))
    assert "forward n/a" in targets and "no verdict" in targets and "forward + backward 1.00x (not met)" in targets
    # a raw output written before the check (0/0 stored as 0.0) renders as n/a too, never "0.00x (met)"
    old = [dict(rows[0], mem_ratio=0.0, mem_fused_MB=0.0, mem_einsum_MB=0.0)]
    text = ha.page({"meta": meta, "repeats": 1, "attention": old, "training": None}, sud)
    assert "(met)" not in text and "| n/a |" in text
    assert ha.mem_ratio(2**20, 4 * 2**20) == 0.25 and ha.mem_ratio(2**20, 4096) is None


# ------------------------------------------------------------------------------------------------ B3
def test_bare_sa_results_path(capsys, monkeypatch, tmp_path):
    bare = load_bench("bare_sa")
    _refused(bare.main, ["--repeats", "1", "--skip-scaling", "--results", str(tmp_path / "typo.json")], capsys,
             "--results", "typo.json", "is not a file")
    assert bare.DEFAULT_RESULTS == ROOT / "docs/results/bare_sa/cpu/results.json"  # not relative to the cwd
    monkeypatch.chdir(tmp_path)
    parser = bare.argparse.ArgumentParser()
    assert bare.results_path(parser, None) == (bare.DEFAULT_RESULTS if bare.DEFAULT_RESULTS.is_file() else None)


# ------------------------------------------------------------------------------------------------ B4
def test_unknown_section_and_empty_batch_are_refused(capsys):
    _refused(load_bench("lm_throughput").main, [*LM, "--sections", "2,5"], capsys, "--sections", "'5'")
    _refused(load_bench("image_models").main, ["--batch", "0"], capsys, "--batch", "0 must be an integer >= 1")


def test_intrinsic_notes_a_requested_mha2nd_it_did_not_run(capsys):
    load_bench("intrinsic_attention").main(["--contexts", "8", "--dim", "8", "--layers", "1", "--heads", "2",
                                            "--vocab", "8", "--batch", "1", "--reps", "1", "--warmup", "0",
                                            "--mha2nd-max-ctx", "4", "--variants", "mha", "mha2nd"])
    out = capsys.readouterr().out
    assert "mha2nd: not run at context 8 (above --mha2nd-max-ctx 4" in out


def test_sudoku_quick_keeps_explicit_values(monkeypatch, capsys):
    sg = load_bench("sudoku_generator")
    seen = {}
    monkeypatch.setattr(sg, "count_solutions", lambda *a: None)
    monkeypatch.setattr(sg, "generate_puzzles", lambda *a, **k: None)
    monkeypatch.setattr(sg, "bench_generation", lambda *a: seen.setdefault("gen", a) and [])
    monkeypatch.setattr(sg, "bench_solver", lambda reps, n: seen.setdefault("solver", (reps, n)) and {})
    monkeypatch.setattr(sg, "bench_workers", lambda *a: seen.setdefault("workers", a))
    sg.main(["--quick", "--reps", "2", "--targets", "30", "--no-plain"])
    assert seen["gen"][:3] == ([30], 20, 2) and seen["solver"] == (2, 100) and "workers" not in seen
    assert capsys.readouterr().out.startswith("run: device cpu")


# ------------------------------------------------------------------------------------------------ B5
def test_eqt_forwards_a_failed_worker_in_one_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    env.pop("ENERGYFORMER_DEBUG", None)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/eqt.py"), "--length", "4", "--batch", "1",
                          "--repeats", "1", "--model-set", "bogus=1"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        next(line for line in out.stderr.splitlines() if "worker stopped" in line)]
    assert "unknown key 'bogus'" in out.stderr and out.stdout.startswith("run: device cpu")


def test_eqt_refuses_bad_arguments_before_starting_a_worker(capsys):
    eqt = load_bench("eqt")
    _refused(eqt.main, ["--before", "no_such_rev_xyz"], capsys, "--before", "no_such_rev_xyz")
    _refused(eqt.main, ["--tol", "-1"], capsys, "--tol")
    _refused(eqt.main, ["--model-set", "dim"], capsys, "--model-set", "KEY=VALUE")
    _refused(eqt.main, ["--repeats", "0"], capsys, "--repeats")
