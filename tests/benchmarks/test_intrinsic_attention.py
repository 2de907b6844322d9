"""benchmarks/intrinsic_attention.py runs and reports consistent numbers (tiny sizes; no timing claims)."""

from .bench_script import load_bench


def test_tiny_benchmark_table():
    b = load_bench("intrinsic_attention")
    args = b.main.__globals__["argparse"].Namespace(
        contexts=[16], variants=["mha", "momen_mha", "mha2nd1st", "mha2nd"], dim=16, layers=1, heads=2, vocab=32,
        batch=1, reps=2, warmup=1, threads=1, mha2nd_max_ctx=256, device="cpu", bf16=False, json=None)
    res = b.bench(args)[16]
    assert res["mha"]["ratio_median"] == 1.0 and res["mha"]["flops_ratio"] == 1.0
    assert res["momen_mha"]["flops_ratio"] == 1.0        # momentum adds no matmul
    assert res["mha2nd1st"]["flops_ratio"] > 1.0           # two extra N×N matmuls per head
    assert all(r["memory_mib"] > 0 and r["median_s"] > 0 for r in res.values())
    meta = {"threads": 1, "torch": "x", "cpus": 2, "nice": 0, "load_before": [1.0, 1, 1], "load_after": [2.0, 1, 1],
            "command": "python benchmarks/intrinsic_attention.py"}
    assert "| mha2nd1st |" in b.markdown({16: res}, vars(args), meta)


def test_render_only_rebuilds_the_page_from_the_json_alone(tmp_path):
    """--json then --render-only: the page comes from the raw output, the same bytes every time, and says
    how loaded the machine was (its recorded load average) with its spread."""
    b = load_bench("intrinsic_attention")
    out = tmp_path / "benchmark.json"
    b.main(["--contexts", "16", "--variants", "mha", "momen_mha", "--dim", "16", "--layers", "1", "--vocab", "32",
            "--batch", "1", "--reps", "2", "--warmup", "0", "--json", str(out)])
    raw = out.read_text()
    assert '"times_s"' in raw and '"load_before"' in raw
    b.main(["--render-only", str(tmp_path)])
    page = (tmp_path / "benchmark.md").read_text()
    b.main(["--render-only", str(tmp_path)])
    assert (tmp_path / "benchmark.md").read_text() == page
    import json

    load = load_bench("_page").load_words(json.loads(raw)["meta"])  # 'under load' only when something else ran
    assert load in page and "MomenMHA ≤ 1.05x" in page and "| momen_mha |" in page
