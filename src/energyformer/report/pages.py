"""The results pages under ``docs/results/`` and what renders each one (issue 22).

A :class:`Page` is one or more ``.md`` files in one folder plus the command that re-renders them from
the artifacts committed in that folder (the *page contract*: the command trains nothing, reads only
the folder and the package, and writes the same bytes every time). A page with no generator is
hand-written: ``energyformer report`` lists it as "hand-written: not checkable" and ``--check`` fails
on it. Files in a folder that are measurements rather than pages (a benchmark script's verbatim
output, a raw ``.txt``) are :class:`Artifact` s: listed, never rendered.

``PAGES`` is the registry; :func:`unregistered` names every ``.md`` under ``docs/results`` that no
entry claims, so a new page cannot be added without saying how it is made.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

RESULTS = "docs/results"


@dataclass(frozen=True)
class Reproduce:
    """``energyformer reproduce NAME --report-only --out DIR``: the page contract of a reproduction."""

    name: str

    def argv(self, out: Path) -> list[str]:
        return [sys.executable, "-m", "energyformer.cli", "reproduce", self.name, "--report-only", "--out", str(out)]

    def describe(self) -> str:
        return f"energyformer reproduce {self.name} --report-only --out DIR"


@dataclass(frozen=True)
class Script:
    """``python ROOT/SCRIPT ARGS`` (a ``benchmarks/`` or ``scripts/`` render-only mode); ``{out}`` in ARGS is
    the folder rendered into."""

    path: str
    args: tuple[str, ...] = ()

    def argv(self, out: Path, root: Path) -> list[str]:
        return [sys.executable, str(root / self.path), *(a.replace("{out}", str(out)) for a in self.args)]

    def describe(self) -> str:
        return " ".join(["python", self.path, *(a.replace("{out}", "DIR") for a in self.args)])


Generator = Reproduce | Script


@dataclass(frozen=True)
class Page:
    """One results page: ``files`` (names inside ``folder``: ``.md`` pages, or a derived table such as a
    CSV) rendered by ``generator``.

    ``inputs``: the committed artifacts the render reads (checked before it runs, so a missing one is
    a one-line error naming the file). ``generator = None``: hand-written, ``why`` says what is missing.
    ``readme``: whether the README's results section summarises it.
    """

    name: str
    folder: str
    files: tuple[str, ...] = ("README.md",)
    generator: Generator | None = None
    inputs: tuple[str, ...] = ("results.json",)
    why: str = ""
    readme: bool = True

    @property
    def generated(self) -> bool:
        return self.generator is not None

    def describe(self) -> str:
        return self.generator.describe() if self.generator else f"hand-written: not checkable ({self.why})"


@dataclass(frozen=True)
class Artifact:
    """A committed measurement that is not a page (verbatim script output): listed, never rendered."""

    folder: str
    file: str
    source: str


def _p(name: str, sub: str, files: Sequence[str] = ("README.md",), generator: Generator | None = None,
       **kw) -> Page:
    return Page(name, f"{RESULTS}/{sub}", tuple(files), generator, **kw)


PAGES: tuple[Page, ...] = (
    _p("cem", "cem", ["README.md", "cpu/README.md"], Reproduce("cem-lm"), inputs=("cpu/results.json",)),
    _p("cem-gp", "cem/gp", ["README.md", "cpu/README.md"], Reproduce("cem-gp"),
       inputs=("cpu/results.json",)),
    _p("cem-benchmarks", "cem", ["benchmarks.md"], Script("benchmarks/lm_throughput.py", ("--render-only", "{out}")),
       inputs=("bench_lm_throughput.txt", "bench_cem_attention.txt"), readme=False),
    _p("cem-gpu", "cem/gpu_h100", ["README.md"], Script("benchmarks/gpu_lm.py", ("--render-only", "{out}")),
       inputs=("gpu_lm_98ac984.md", "gpu_lm_graphs_fef18e0.md", "gpu_lm_5e2ffb8.md", "gpu_lm_d80aaf5.md",
               "gpu_lm_graphs_d80aaf5.md", "gpu_lm_paper_d80aaf5.md", "gpu_lm_compiled_d80aaf5.md",
               "gpu_lm_gathered_d80aaf5.md", "gpu_lm_paper_5cde3b5.md", "gpu_lm_graphs_855edd0.md",
               "gpu_lm_compiled_855edd0.md"), readme=False),
    _p("intrinsic-lm", "intrinsic", ["README.md", "cpu/README.md", "gpu/README.md"], Reproduce("intrinsic-lm"),
       inputs=("cpu/results.json", "gpu/results.json")),
    _p("intrinsic-cpu-benchmark", "intrinsic/cpu", ["benchmark.md"],
       Script("benchmarks/intrinsic_attention.py", ("--render-only", "{out}")), inputs=("benchmark.json",),
       readme=False),
    _p("hyperset-sudoku", "hyperset", ["README.md", "cpu/README.md", "gpu/README.md"], Reproduce("hyperset-sudoku"),
       inputs=("cpu/results.json", "gpu/results.json")),
    _p("hyperset-benchmark", "hyperset", ["benchmark.md"],
       Script("benchmarks/hyperset_attention.py", ("--render-only", "{out}")),
       inputs=("benchmark_attention.json", "benchmark_sudoku.json"), readme=False),
    _p("hyperset-gpu", "hyperset/gpu_h100", ["README.md"],
       Script("benchmarks/hyperset_gpu.py", ("--render-only", "{out}")),
       inputs=("gpu_throughput_98ac984.md", "gpu_throughput_fef18e0.md", "gpu_throughput_compile_83f4ef8.md",
               "gpu_throughput_5e2ffb8.md", "gpu_throughput_d80aaf5.md", "gpu_throughput_compiled_d80aaf5.md",
               "gpu_throughput_compiled_855edd0.md"),
       readme=False),
    _p("hyperset-plateau", "hyperset/plateau", ["README.md"],
       Script("scripts/hyperset_plateau_summary.py", ("--render-only", "{out}")),
       inputs=("hyperset_statenorm_d64_L8.json", "released_code_hyperset_d64_L8.json", "paper_fig3a_board_acc.csv",
               "gpu/env.txt", "gpu/released_code_hyperset.json", "gpu_h100/env.txt",
               "gpu_h100/hyperset_sigmoid_seed0.metrics.jsonl", "gpu_h100_full/env.txt",
               "gpu_h100_full/hyperset_sigmoid_seed0.metrics.jsonl")),
    _p("hyperset-plateau-summary", "hyperset/plateau", ["summary.csv"],
       Script("scripts/hyperset_plateau_summary.py", ("{out}",)), inputs=(), readme=False),
    _p("hyperset-plateau-ablation", "hyperset/plateau/ablation", ["README.md"],
       Script("scripts/hyperset_plateau_ablation.py", ("--render-only", "{out}")), readme=False),
    _p("hyperset-images", "images", ["README.md", "cpu/README.md"], Reproduce("hyperset-images"),
       inputs=("cpu/results.json", "cpu/benchmark.md")),
    _p("bare-sa", "bare_sa", ["README.md", "cpu/README.md"], Reproduce("bare-sa"),
       inputs=("cpu/results.json", "cpu/benchmark.md")),
    _p("eqt", "eqt", ["README.md", "cpu/README.md"], Reproduce("eqt"), inputs=("cpu/results.json", "cpu/overheads.json")),
)

#: the device runs of 2026-11-26 (issues 20 and 21)
H100 = ("one H100, 2026-11-26 (the header's commit is the device copy's stale git HEAD 994ae78; the code that "
        "ran is the commit in the file name)")
H100_1127 = "one H100, 2026-11-27 (code d80aaf5 plus scripts/gpu_checks.sh's new phases)"
H100_1127B = "one H100, 2026-11-27, the day's second device session (code 5cde3b5)"
H100_1127C = "one H100, 2026-11-27, the day's third device session (code 855edd0)"

ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(f"{RESULTS}/eqt", "benchmark_0c0d50d.md",
             "verbatim output of `python benchmarks/eqt.py --repeats 7 --threads 1` at commit 0c0d50d (EqT's "
             "overheads against its baseline, 2 x 64 backbone, one CPU thread)"),
    Artifact(f"{RESULTS}/eqt", "benchmark_paper_size_0c0d50d.md",
             "verbatim output of `python benchmarks/eqt.py --repeats 5 --threads 1 --model-set n_layers=6 "
             "--model-set dim=256 --model-set heads=8` (the paper's 6 x 256 backbone, untrained, one CPU thread)"),
    Artifact(f"{RESULTS}/bare_sa/cpu", "benchmark.md",
             "verbatim output of `python benchmarks/bare_sa.py --results results.json` (an input of the bare-sa page)"),
    Artifact(f"{RESULTS}/images/cpu", "benchmark.md",
             "verbatim table of `python benchmarks/image_models.py --out DIR` (an input of the hyperset-images page)"),
    Artifact(f"{RESULTS}/intrinsic/gpu", "benchmark.md",
             "verbatim output of `python benchmarks/intrinsic_attention.py --device cuda ...`"),
    Artifact(f"{RESULTS}/hyperset", "gpu_throughput.md",
             "verbatim output of `python benchmarks/hyperset_gpu.py --out DIR/gpu_throughput.md` (issue 20, on a GPU)"),
    Artifact(f"{RESULTS}/hyperset", "ops_per_iteration.md",
             "verbatim output of `python benchmarks/hyperset_ops.py --ops --out DIR/ops_per_iteration.md` (issue 20: "
             "kernels, bytes and FLOPs per iteration counted on fake tensors, no GPU)"),
    Artifact(f"{RESULTS}/hyperset", "ops_per_iteration_f36e7c7.md",
             "the same count for the library at commit f36e7c7 (what the H200 timed in gpu_throughput.md)"),
    Artifact(f"{RESULTS}/hyperset", "ops_per_iteration_5992c10.md",
             "the same count for the library at commit 5992c10 (after the first round of issue-20 speed work)"),
    Artifact(f"{RESULTS}/hyperset", "ops_per_iteration_b85a1d3.md",
             "the same count for the library at commit b85a1d3 (before the copies and strided ops of the iteration "
             "were removed; with the kernel path's row)"),
    Artifact(f"{RESULTS}/hyperset", "ops_per_iteration_b0f1ce6.md",
             "the same count for the library at commit b0f1ce6 (the sphere norm before its loud overflow check)"),
    Artifact(f"{RESULTS}/hyperset", "ops_per_iteration_ec196df.md",
             "the same count for the library at commit ec196df (the loud overflow check's first form: 11 ops per norm)"),
    Artifact(f"{RESULTS}/hyperset", "host_time_cpu_4fe48e2.txt",
             "`python benchmarks/hyperset_gpu.py` at a host-bound size (d 16, L 24, batch 1) on CPU, from the trees of "
             "60a00b4 and 4fe48e2 alternately (issue 20: host time per iteration; the command is in the file)"),
    *(Artifact(f"{RESULTS}/hyperset", f"host_time_{c}.md",
               f"verbatim output of `python benchmarks/host_time.py --suite hyperset --out ...` with the library at "
               f"commit {c} (issue 20: the host's share of an eager training step, the CUDA kernels' launches stubbed, "
               "timed on CPU against the looped transformer)")
      for c in ("865a5cc", "38ffeb8")),
    Artifact(f"{RESULTS}/hyperset", "compare_commits_4fe48e2.txt",
             "output of `python benchmarks/compare_commits.py --base 60a00b4` at 4fe48e2 (the Sudoku configs' CPU step "
             "time before and after the host-time changes)"),
    Artifact(f"{RESULTS}/hyperset", "cpu_symmetrise_4cc83cf.md",
             "verbatim output of `python benchmarks/hyperset_gpu.py --dim 64 --heads 4 --iterations 8 --batch 16 "
             "--modes training --models ...` on CPU (the CPU study's size: the bi-softmax symmetrised by products vs "
             "by transposed sums)"),
    Artifact(f"{RESULTS}/hyperset", "kernel_resources.md",
             "verbatim output of `python scripts/hyperset_kernel_resources.py --out DIR/kernel_resources.md` "
             "(registers, spills, shared memory of attention.impl kernel for sm_90, compiled without a GPU)"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_98ac984.md",
             f"`python benchmarks/hyperset_gpu.py --precisions bf16 --modes training --keep-going` on {H100}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_fef18e0.md",
             f"the same with `--cuda-graph` (every model also with its whole step one CUDA graph) on {H100}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_compile_83f4ef8.md",
             f"the same with `--compile` (torch.compile, as train.compile) on {H100}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_5e2ffb8.md",
             "`python benchmarks/hyperset_gpu.py --precisions bf16 --modes training --cuda-graph --models "
             f"'Hyper-SET;Hyper-SET, attention.impl einsum'` (scripts/gpu_checks.sh session) on {H100}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_profile_83f4ef8.md",
             f"`python benchmarks/gpu_profile.py --suite hyperset` (where a training step's time goes) on {H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_98ac984.md",
             "`python benchmarks/gpu_lm.py --precisions bf16 --keep-going` (issue 21's table; the kernel's default "
             f"grid was 'rows' then) on {H100}"),
    Artifact(f"{RESULTS}/cem", "heads_stages.md",
             "verbatim output of `python scripts/cem_heads_resources.py --out DIR/heads_stages.md` (registers, "
             "spills, shared memory of the one-program-per-head kernels by tiles and pipelining stages, sm_90, "
             "compiled without a GPU)"),
    Artifact(f"{RESULTS}/cem", "heads_gather_resources.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4,64x32w4 --stages 1 "
             "--head-sums atomic,gather --shared-dtype accumulation,operand --out DIR/heads_gather_resources.md` "
             "(issue 21: registers, spills, shared memory of one program per head with the head sums gathered and "
             "the shared products in the operand dtype, sm_90, compiled without a GPU)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_tiles_98ac984.md",
             f"`python benchmarks/cem_tiles.py --grid rows,heads --causal-chunks 4,8` (launches vs SDPA) on {H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_profile_1k_83f4ef8.md",
             f"`python benchmarks/gpu_profile.py --suite cem` at N 1,024 x B 8 on {H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_profile_4k_83f4ef8.md",
             f"`python benchmarks/gpu_profile.py --suite cem --setting 4096x2` on {H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_graphs_fef18e0.md",
             "`python benchmarks/gpu_lm.py --modes training --cuda-graph --models ...` (default grid 'auto' = one "
             f"program per head, vs grid rows; eager and CUDA graph) on {H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "pytest_cuda_98ac984.txt",
             f"`pytest -m cuda` of the CEM and Hyper-SET kernels' tests on {H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "pytest_cuda_fef18e0.txt",
             f"`pytest -m cuda` of the CEM kernel (new default launch) and the CUDA-graph step on {H100} (one "
             "failure: the bf16 graphed-step test's tolerance, since rewritten and not yet rerun on a GPU)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_5e2ffb8.md",
             "`python benchmarks/gpu_lm.py --precisions bf16 --modes training --models ...` (the default kernel "
             "launch, heads inner, 2 stages, the paper configuration on the kernel and blocked; N 1k and 4k) on "
             f"{H100}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "pytest_cuda_5e2ffb8.txt",
             f"`pytest -m cuda` of every CUDA-marked test file on {H100} (two failures: the GP regressor's config "
             "key in tests/train/test_cuda.py, since fixed and checked on CPU by tests/train/test_cuda_configs.py)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "env.txt", "the device's nvidia-smi and versions for the gpu_h100 files"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "env_d80aaf5.txt", "the same for the session of 2026-11-27 (code d80aaf5)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_d80aaf5.md",
             "`python benchmarks/gpu_lm.py --precisions bf16 --modes training --settings 1024x8,4096x2 --models ...` "
             "(the default launch against the head sums gathered, with and without the shared products in bf16, and "
             f"Σ dS gathered too; scripts/gpu_checks.sh gather) on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_graphs_d80aaf5.md",
             f"the same with `--cuda-graph` (eager and every step one CUDA graph; gpu_checks.sh gather) on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_gathered_d80aaf5.md",
             "the default launch against the head sums gathered (float32 and bf16 shared products), eager and graphed, "
             f"6 repeats: the run that decided `head_sums`/`shared_dtype` 'auto' on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_paper_d80aaf5.md",
             "the paper configuration at N 1,024: its default (loop kernels), the blocked path and one program per "
             f"head on 64 × 32 tiles (gpu_checks.sh gather2) on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_compiled_d80aaf5.md",
             "`python benchmarks/gpu_lm.py --compile reduce-overhead --cuda-graph --settings 1024x8 --models 'full CEM "
             f"T=1 (auto path)'` (train.compile against the eager step as one CUDA graph) on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_tiles_gather_4k_d80aaf5.md",
             "`python benchmarks/cem_tiles.py --tiles 16x64,64x32 --grid heads --head-sums atomic,gather,gather_all "
             f"--shared-dtype accumulation,operand --n 4096 --batch 2` (the kernels alone) on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_profile_4k_d80aaf5.md",
             "`python benchmarks/gpu_profile.py --suite cem --setting 4096x2` with the head sums gathered and the shared "
             f"products in bf16 on {H100_1127}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "pytest_cuda_d80aaf5.txt",
             f"`pytest -m cuda`: the gathered head sums' tests, then every CUDA-marked test file on {H100_1127} (all passed)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "env_5cde3b5.txt", f"the device's nvidia-smi and versions on {H100_1127B}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_paper_5cde3b5.md",
             "the paper configuration at N 1,024, eager and every step one CUDA graph: its default (one program per "
             f"head, 64 × 32), its products queries first and its loop kernels (gpu_checks.sh next) on {H100_1127B}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "product_order_5cde3b5.md",
             "what the logs beside it show: product_order 'auto' (then the default) broke the backward's key-tile "
             f"kernel at the model's size on {H100_1127B}; what changed (issue 21)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "next_5cde3b5.txt",
             f"every log of `scripts/gpu_checks.sh next 560` on {H100_1127B}, verbatim, one after another"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "diag_5cde3b5.txt",
             f"a throw-away diagnosis's output (psum_keys × product_order at the model's size) on {H100_1127B}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "order_5cde3b5.txt",
             "every log of `scripts/gpu_checks.sh order 395` as it was then (the model-size test of 'auto' against "
             f"'queries', every CEM kernel CUDA test), verbatim, on {H100_1127B}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "env_855edd0.txt", f"the device's nvidia-smi and versions on {H100_1127C}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "pytest_cuda_855edd0.txt",
             "`pytest -m cuda tests/energies/test_cem_kernel_cuda.py` (the default launch against float64 at the "
             "model's size among them), then `tests/train/test_cuda.py -k compiled` (gpu_checks.sh next, next2) on "
             f"{H100_1127C} (all passed)"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_tiles_kv_4k_855edd0.md",
             "`python benchmarks/cem_tiles.py --tiles 16x64,64x32,128x32w8 --grid heads --head-sums gather "
             "--shared-dtype operand --kv ',128x32w8' --psum-keys 0,512 --n 4096 --batch 2` (the kernels alone: the "
             f"key-tile kernel's own tiles and _psum_h's runs of keys; gpu_checks.sh next) on {H100_1127C}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_graphs_855edd0.md",
             "`python benchmarks/gpu_lm.py --settings 1024x8,4096x2 --cuda-graph --models ...` (the default launch "
             "against the key-tile kernel on 128 × 32, 8 warps, with the other kernels on 16 × 64, 64 × 32 and "
             f"128 × 32; eager and every step one CUDA graph; gpu_checks.sh next) on {H100_1127C}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_profile_kv_4k_855edd0.md",
             "`python benchmarks/gpu_profile.py --suite cem --setting 4096x2` of the default launch and the key-tile "
             f"kernel on 128 × 32 (8 warps) on {H100_1127C}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "order_bisect_855edd0.md",
             "`python scripts/cem_order_bisect.py --n 1024 --batch 8`, then `--batch 2` (each kernel's product_order "
             f"flag turned alone at the model's size; gpu_checks.sh order) on {H100_1127C}"),
    Artifact(f"{RESULTS}/cem/gpu_h100", "gpu_lm_compiled_855edd0.md",
             "`python benchmarks/gpu_lm.py --compile reduce-overhead --cuda-graph --settings 1024x8 --models 'full CEM "
             f"T=1 (auto path)'` (gpu_checks.sh next2) on {H100_1127C}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_compiled_855edd0.md",
             "`python benchmarks/hyperset_gpu.py --compile reduce-overhead --cuda-graph --models Hyper-SET` "
             "(train.compile against the eager step as one CUDA graph; the table was written, then the process "
             f"did not exit before the step's 110 s timeout; gpu_checks.sh next2) on {H100_1127C}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_profile_855edd0.md",
             "`python benchmarks/gpu_profile.py --suite hyperset --models 'looped transformer;Hyper-SET'` (eager: "
             f"where the step waits, device and host tables; gpu_checks.sh next2) on {H100_1127C}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_d80aaf5.md",
             "`python benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 7 --models 'Hyper-SET;"
             f"Hyper-SET, feed-forward norm and ReLU as two ops'` (eager) on {H100_1127}"),
    Artifact(f"{RESULTS}/hyperset/gpu_h100", "gpu_throughput_compiled_d80aaf5.md",
             "`python benchmarks/hyperset_gpu.py --compile reduce-overhead --cuda-graph --models Hyper-SET` "
             f"(train.compile against the eager step as one CUDA graph; Dynamo hit its recompile limit) on {H100_1127}"),
    Artifact(f"{RESULTS}/hyperset/plateau/gpu", "env.txt",
             "the device's nvidia-smi and versions beside the GPU runs of the hyperset-plateau page's GPU section"),
    Artifact(f"{RESULTS}/hyperset/plateau/gpu_h100", "env.txt",
             "the device's nvidia-smi and versions beside the H100 runs of the hyperset-plateau page's first "
             "1,000 steps with the sigmoid energy"),
    Artifact(f"{RESULTS}/hyperset/plateau/gpu_h100_full", "env.txt",
             "the device's nvidia-smi and versions beside the runs of the study's gpu scale (4,000 steps)"),
    Artifact(f"{RESULTS}/cem", "bench_lm_throughput.txt", "output of `python benchmarks/lm_throughput.py`"),
    Artifact(f"{RESULTS}/cem", "bench_cem_attention.txt", "output of `python benchmarks/cem_attention.py`"),
    Artifact(f"{RESULTS}/cem", "activation_bytes.md",
             "verbatim output of `python benchmarks/activation_bytes.py --seq 64 --out DIR/activation_bytes.md` "
             "(issue 21: activations saved per token and layer, counted on CPU)"),
    Artifact(f"{RESULTS}/cem", "kv_tiles_resources.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4 --stages 1 --head-sums gather "
             "--shared-dtype operand --kv 16x64w4,...,128x64w8 --out DIR/kv_tiles_resources.md` (issue 21: registers, "
             "spills, shared memory of the backward's key-tile kernel on tiles of its own, sm_90, compiled without a "
             "GPU)"),
    Artifact(f"{RESULTS}/cem", "psum_resources.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4,64x32w4 --stages 1 --head-sums "
             "gather --shared-dtype operand --psum-keys 0,512 --out DIR/psum_resources.md` (issue 21: registers, "
             "spills, shared memory with _psum_h's key runs, sm_90, compiled without a GPU)"),
    Artifact(f"{RESULTS}/cem", "tensor_cores_tiles.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4,...,128x64w8 --stages 1,2 "
             "--head-sums gather --shared-dtype operand --product-order auto,queries --title ... --out "
             "DIR/tensor_cores_tiles.md` (issue 21: the share of each kernel's products on Hopper's wgmma by tiles and "
             "product order, with registers, spills and shared memory, sm_90, compiled without a GPU)"),
    Artifact(f"{RESULTS}/cem", "tensor_cores_kv.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4 --stages 1,2 --head-sums "
             "gather --shared-dtype operand --kv 16x64w4,...,128x64w8 --product-order auto,queries --title ... --out "
             "DIR/tensor_cores_kv.md` (issue 21: the key-tile kernel's products on wgmma by its own tiles and the "
             "order it forms them in, sm_90, compiled without a GPU)"),
    Artifact(f"{RESULTS}/cem", "heads_d2048_resources.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4,64x32w4 --stages 1 --dim 2048 "
             "--heads 16x128 --title ... --out DIR/heads_d2048_resources.md` (issue 21: one program per head at D "
             "2,048, sm_90, compiled without a GPU)"),
    Artifact(f"{RESULTS}/cem", "paper_heads_resources.md",
             "verbatim output of `python scripts/cem_heads_resources.py --tiles 16x64w4,64x32w4 --stages 1 --head-sums "
             "auto --shared-dtype auto --readout sum,stack --x-cols 8 --product-order queries,auto --title ... --out "
             "DIR/paper_heads_resources.md` (issue 21: the paper configuration's per-head factors and value columns on "
             "one program per head: registers, spills, shared memory, products on wgmma, sm_90, compiled without a "
             "GPU)"),
    Artifact(f"{RESULTS}/cem", "cem_flops.md",
             "output of `python benchmarks/cem_flops.py [ARGS]` for the four argument sets it names (issue 21, item 1: "
             "FLOPs and tile-model bytes per formulation; quoted by docs/cem.md, pinned by "
             "tests/benchmarks/test_cem_flops.py)"),
    Artifact(f"{RESULTS}/cem", "cem_flops_kv.md",
             "output of `python benchmarks/cem_flops.py --ns 1024 4096 --shared-bytes 2 --heads-tiles 16 64|64 32 "
             "--kv-keys 16|128` (issue 21: FLOPs, tile-model bytes and the key-tile kernel's dq atomics, counted)"),
    Artifact(f"{RESULTS}/cem", "lm_flops.md",
             "verbatim output of `python benchmarks/lm_flops.py --ns 1024 4096 --out DIR/lm_flops.md` (issue 21: "
             "training-step FLOPs per model and the FLOP ceiling of each tokens/s ratio, counted on CPU)"),
    *(Artifact(f"{RESULTS}/cem", f"cem_ops_n{n}_{c}.md",
               f"verbatim output of `python benchmarks/cem_ops.py --seq {n} --ops --top 12 ...` with the library at "
               f"commit {c} (issue 21: ops, bytes, FLOPs and saved bytes per layer of a bf16 training step under "
               "CUDA's autocast, counted on fake tensors)")
      for n in (1024, 4096) for c in ("cf2053a", "476f938", "82eacd0", "6e61078", "2d1bc65")),
    *(Artifact(f"{RESULTS}/cem", f"host_time_{c}.md",
               f"verbatim output of `python benchmarks/host_time.py --suite cem --out ...` with the library at commit {c} "
               "(issue 21: the host's share of an eager training step, CUDA's kernel path with its Triton launches "
               "stubbed, timed on CPU against Llama)")
      for c in ("865a5cc", "82fecb2", "01078f9", "8bbf1c4")),
    Artifact(f"{RESULTS}/cem", "compare_commits_474e0b9.txt",
             "output of `python benchmarks/compare_commits.py --base 865a5cc --head HEAD --configs lm/cem_kq_shared "
             "lm/cem_full --rounds 6 --steps 3 --threads 1 --set model.dim=256 model.heads=8 model.max_seq_len=256` at "
             "474e0b9 (the round's CEM changes: CPU step time)"),
    Artifact(f"{RESULTS}/cem", "compare_commits_150c4b9.txt",
             "output of `python benchmarks/compare_commits.py --base 0f8197e~1 --head HEAD --configs lm/cem_full "
             "--rounds 9 --steps 3 --threads 1 --set model.dim=256 model.heads=8 model.max_seq_len=256` at 150c4b9 "
             "(the preconditioner's factors once per solver run: CPU step time)"),
    Artifact(f"{RESULTS}/cem", "compare_commits_d0dfe9a.txt",
             "output of `python benchmarks/compare_commits.py --base 865a5cc --head d0dfe9a --configs lm/cem_full "
             "lm/cem_attn_t1 --rounds 6 --steps 3 --threads 1 --set model.dim=256 model.heads=8 model.max_seq_len=256` "
             "(the preconditioner changes: CPU step time)"),
    Artifact(f"{RESULTS}/cem", "compare_commits_61e1869.txt",
             "output of `python benchmarks/compare_commits.py --base cf2053a --head 61e1869 --configs lm/cem_full "
             "lm/cem_attn_t1 --rounds 6 --steps 3 --set model.dim=256 model.heads=8 model.max_seq_len=256` (the "
             "blocked path's per-head read-out and key prefixes: CPU step time)"),
    Artifact(f"{RESULTS}/cem", "compare_commits_71f1b91.txt",
             "output of `python benchmarks/compare_commits.py --base 61e1869 --head 71f1b91 --configs lm/cem_attn_t1 "
             "lm/cem_full --rounds 6 --steps 3 --set model.dim=256 model.heads=8 model.max_seq_len=256` (the read-out "
             "as one matmul: CPU step time; the per-head preconditioners' form was then kept as it was)"),
    Artifact(f"{RESULTS}/cem", "compare_commits_caca700.txt",
             "output of `python benchmarks/compare_commits.py --base a679d5c --head HEAD --configs lm/llama "
             "lm/cem_full lm/cem_attn_t2_dlr --rounds 5 --steps 5` at caca700 (CEM's CPU step time since the "
             "committed CPU benchmark, issue 21's 'CPU ratios do not regress')"),
    Artifact(f"{RESULTS}/cem", "compare_commits_6d34d3b.txt",
             "output of `python benchmarks/compare_commits.py --base a679d5c --head HEAD --configs lm/llama "
             "lm/cem_full lm/cem_attn_t2_dlr --rounds 7 --steps 5` at 6d34d3b (the same check after the CPU "
             "NaN-query guard in every SDPA call)"),
    Artifact(f"{RESULTS}/cem", "compare_commits_8a17f28.txt",
             "output of `python benchmarks/compare_commits.py --base 8a17f28` (CEM's CPU step time did not regress)"),
    Artifact(f"{RESULTS}/core", "make_test_0311343.txt",
             "`make test` on a fresh clone of 0311343 with `PYTEST_ADDOPTS=--durations=25`: pytest's slowest tests, "
             "its summary and the wall time (the README's Tests section)"),
    Artifact(f"{RESULTS}/core", "make_demo_0311343.txt",
             "`make demo` on the same fresh clone after its `make test`: the stages' lines and the wall time (the "
             "README's demo paragraph)"),
    Artifact(f"{RESULTS}/core", "compare_commits_issue19.txt",
             "output of `python benchmarks/compare_commits.py --base 2755fd7` (the core refactor's step-time cost)"),
)


@dataclass
class Registry:
    """Pages and artifacts looked up by name (``energyformer report NAME``)."""

    pages: tuple[Page, ...] = PAGES
    artifacts: tuple[Artifact, ...] = ARTIFACTS
    _by_name: dict[str, Page] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {}
        for p in self.pages:
            if p.name in self._by_name:
                raise ValueError(f"report page {p.name!r} is registered twice")
            self._by_name[p.name] = p

    def select(self, names: Iterable[str] = ()) -> list[Page]:
        """The named pages in registry order (all when ``names`` is empty); an unknown name is a ConfigError."""
        names = list(names)
        bad = [n for n in names if n not in self._by_name]
        if bad:
            raise ConfigError(f"report page {bad[0]!r}: not registered; registered: {', '.join(self._by_name)}")
        return [p for p in self.pages if not names or p.name in names]

    def folders(self) -> set[str]:
        """Folders holding a page or artifact (a page file in a sub-folder, ``cpu/README.md``, claims it too)."""
        files = [f"{p.folder}/{f}" for p in self.pages for f in p.files]
        files += [f"{a.folder}/{a.file}" for a in self.artifacts]
        return {f.rsplit("/", 1)[0] for f in files}

    def unregistered(self, root: Path) -> list[str]:
        """Paths (relative to ``root``) of ``.md`` files and folders under docs/results no entry claims."""
        claimed = {f"{p.folder}/{f}" for p in self.pages for f in p.files}
        claimed |= {f"{a.folder}/{a.file}" for a in self.artifacts}
        base = root / RESULTS
        out = [str(f.relative_to(root)) for f in sorted(base.rglob("*.md"))
               if str(f.relative_to(root)) not in claimed]
        out += [str(d.relative_to(root)) for d in sorted(base.rglob("*")) if d.is_dir()
                and str(d.relative_to(root)) not in self.folders()
                and not any(x.startswith(str(d.relative_to(root)) + "/") for x in self.folders())]
        return out
