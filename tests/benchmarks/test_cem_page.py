"""benchmarks/_cem_page.py reads the CEM benchmarks' verbatim outputs into the page's numbers."""

from .bench_script import load_bench


LM = """device: cpu (cpu); torch 2.13.0+cpu
1-min load average before the run: 11.19 on 2 cores
-- training step (bf16)
  Llama baseline                                   999.0 ms      2,050 tok/s  vs Llama 1.000 [1.000, 1.000]  [min 9, max 10 ms]
  full CEM (T=1)                                   930.1 ms      2,202 tok/s  vs Llama 1.032 [0.857, 1.136]  [min 8, max 11 ms]
  speed-up of the blocked path over the fused path, full CEM (T=1): x4.04 [3.09, 4.96]
""".splitlines()


def test_rows_and_speedups_are_parsed_and_a_target_crossed_by_the_range_says_so(tmp_path):
    m = load_bench("_cem_page")
    lm = m.parse_lm(LM)
    assert lm["rows"][("training step", "bf16")]["full CEM (T=1)"] == (1.032, 0.857, 1.136)
    assert lm["speedup"][("training step", "bf16", "full CEM (T=1)")] == (4.04, 3.09, 4.96)
    (tmp_path / m.LM).write_text("\n".join(LM) + "\n")
    (tmp_path / m.ATT).write_text("torch 2.13.0+cpu, 1 thread(s), 1-min load 6.89 on 2 cores\n")
    page = m.page(tmp_path)
    assert "| full CEM T=1 ≥ 1.0× Llama tokens/s, bf16 autocast | 1.032 [0.857, 1.136]× | MET on the median " \
           "(range crosses 1: min 0.857) |" in page
    assert "| full CEM T=1 ≥ 0.85× Llama tokens/s, float32 | not in the output | – |" in page


def test_the_header_lines_before_the_first_section_are_quoted_and_a_commit_among_them_is_not_called_missing(tmp_path):
    m = load_bench("_cem_page")
    run = "run: device cpu (x), machine x86_64 with 2 cores, 1 torch thread(s); torch 2.13.0+cpu; commit abc1234"
    (tmp_path / m.ATT).write_text("torch 2.13.0+cpu, 1 thread(s), 1-min load 6.89 on 2 cores\n")
    (tmp_path / m.LM).write_text("\n".join(LM) + "\n")
    page = m.page(tmp_path)
    assert "`1-min load average before the run: 11.19 on 2 cores`" in page and "`-- training" not in page
    assert "the commit the outputs were measured on" in page
    (tmp_path / m.LM).write_text("\n".join([run] + LM) + "\n")
    page = m.page(tmp_path)
    assert f"`{run}`" in page and "`1-min load average before the run: 11.19 on 2 cores`" in page
    assert "the commit the outputs were measured on" not in page


def test_the_header_stops_at_a_blank_line_or_the_first_section():
    m = load_bench("_cem_page")
    assert m.parse_lm(["run: commit abc", "== 2. section ==", *LM[2:]])["header"] == ["run: commit abc"]
    assert m.parse_lm(["run: commit abc", "", "load 3", *LM[2:]])["header"] == ["run: commit abc"]
