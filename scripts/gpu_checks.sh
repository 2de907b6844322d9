#!/usr/bin/env bash
# The GPU checks of issues 20 (Hyper-SET on Sudoku) and 21 (CEM kernel) as one scripted device run.
# A device session has about 15 minutes of GPU time, so the work is split in two phases, each
# bounded by its own deadline (every step has a timeout; what finished is kept):
#
#   scripts/gpu_checks.sh probe [SECONDS]  environment, `pytest -m cuda`, Hyper-SET/transformer tokens/s
#                                          at d 768, L 24 (issue 20's benchmark; also the step time
#                                          that sizes the full phase)
#   scripts/gpu_checks.sh speed [SECONDS]  the speed targets of both issues in one call, no training: Hyper-SET/
#                                          transformer tokens/s (bf16 training, every row incl. attention.impl
#                                          kernel), gpu_lm bf16, cem_tiles, then `pytest -m cuda` of the kernels
#                                          (each benchmark with --keep-going: a row that fails is listed, not fatal)
#   scripts/gpu_checks.sh profile [SECONDS] where the step time goes (benchmarks/gpu_profile.py): the CEM suite at
#                                          N 1k (with the paper configuration on one program per head; its loop
#                                          kernels' profile is gpu_profile_1k_83f4ef8.md) and 4k (with the head
#                                          sums gathered, attn_kernel.head_sums: gather), the Hyper-SET
#                                          suite; then hyperset_gpu with torch.compile
#   scripts/gpu_checks.sh graphs [SECONDS]  the speed rows again with every model also as one CUDA graph per step
#                                          (--cuda-graph: the host's launch overhead gone), and the CUDA tests of
#                                          the graphed step and the CEM kernel (default launch: one program per head)
#   scripts/gpu_checks.sh compiled [SECONDS] train.compile's 'reduce-overhead' (Inductor + CUDA graph trees, what a
#                                          user can switch on) against eager steps captured as one CUDA graph
#                                          (--cuda-graph) for Hyper-SET and full CEM T=1 (N 1k), and the CUDA
#                                          tests of training with it (tests/train/test_cuda.py -k compiled)
#   scripts/gpu_checks.sh stages [SECONDS]  the one-program-per-head CEM kernels with 1-3 software-pipelining
#                                          stages (KernelTiles.num_stages; the launches that compile without
#                                          spilling: docs/results/cem/heads_stages.md) at N 1k × B 8 and 4k × B 2,
#                                          and grid heads vs heads_inner (the launch order) at 4k; the paper
#                                          configuration's per-head factors (cem_tiles --h-mode stack): loop
#                                          kernels vs one program per head, 4 and 8 causal chunks, at 1k; the
#                                          head sums atomic vs gathered vs all gathered (head_sums), G and dHs Hᵀ
#                                          in float32 vs bf16 (shared_dtype), at 4k
#   scripts/gpu_checks.sh next [SECONDS]    (~8 min) what the H100 session of 2026-11-27 at code 855edd0 left (its own
#                                          `next` timed the key-tile kernel's tiles: docs/cem.md): the CEM kernel's CUDA
#                                          tests, the model-size one now also for the fastest launch timed and for
#                                          product_order 'auto' without the transposed dk, with the sphere norm's and
#                                          core's CUDA tests; Hyper-SET's bf16 training tokens/s against the
#                                          transformer, eager and graphed (the sphere norm without host reads);
#                                          where the eager step's host time goes in Python (gpu_profile.py --python) for Hyper-SET and CEM at 1k;
#                                          the default launch against the fastest one as CUDA graphs at 1k and 4k
#   scripts/gpu_checks.sh order [SECONDS]   (~3 min) which kernel's turned products break product_order 'auto' on the
#                                          GPU (scripts/cem_order_bisect.py: each kernel's flag alone at the model's
#                                          size, each case in its own process)
#   scripts/gpu_checks.sh next2 [SECONDS]   (~6 min) train.compile's 'reduce-overhead' against the graphed eager step
#                                          for Hyper-SET and full CEM T=1, then the compiled step's CUDA tests and
#                                          Hyper-SET's eager profile (host table: the Triton launches); MHA2nd-lite's
#                                          float32 projection under bf16 against MHA and the bf16 projection
#   scripts/gpu_checks.sh gather [SECONDS]  (2026-11-27) the gathered head sums' CUDA tests, eager and graphed tokens/s at
#                                          1k and 4k against the default launch, Hyper-SET's eager rows, the kernels
#                                          alone at 4k (head sums × shared dtype), every CUDA test; `gather2`: the paper
#                                          configuration at 1k and the 4k profile
#   scripts/gpu_checks.sh plateau [SECONDS] issue 20's "first 1,000 steps" at the paper's size for the plateau's
#                                          localisation: the gpu scale's hyperset, transformer and hyperset_sigmoid
#                                          (Table 19's sigmoid energy) for 1,000 steps, three runs sharing the GPU,
#                                          evaluated every 100 (~4 min; the runs' files in $OUT/runs.tgz: copy them
#                                          into docs/results/hyperset/plateau/gpu/ beside the first GPU run's)
#   scripts/gpu_checks.sh session [SECONDS] one ~9.5-min call for a session's whole device time: Hyper-SET/transformer
#                                          bf16 training tokens/s (eager and one CUDA graph per step), gpu_lm bf16
#                                          training at 1k and 4k (full CEM T=1: the default, head sums gathered, heads
#                                          launched inner; the paper configuration on its three launches; not the rows
#                                          `next` now times), then the plateau phase's three
#                                          1,000-step runs with `pytest -m cuda` beside them (correctness only; the
#                                          runs are stopped at the phase's deadline, their metrics.jsonl kept)
#   scripts/gpu_checks.sh full STEPS|scale [SECONDS]
#        in the background: `energyformer reproduce hyperset-sudoku --scale gpu` cut to its first STEPS
#        steps (evaluation every STEPS/10; `scale`: the scale as declared, its records then reusable) and, if
#        .ref/ holds the authors' released code (kept outside the project: never committed), their
#        Hyper-SET on the same data and recipe for STEPS (not with `scale`); then, alone on the GPU:
#        benchmarks/hyperset_gpu.py, benchmarks/gpu_lm.py (bf16, then fp32) and benchmarks/cem_tiles.py.
#
# Carry (device tool): .whl (pydantic and its needs, absent from the device image; pytest-xdist and execnet:
# `pip download --no-deps -d .whl ...`), data_cache/sudoku (the GPU scale's givens 21-34 data: make it here first, ~30 s), and for `pytest -m cuda` the prepared data of
# tests/train/test_cuda.py's configs: data_cache/{tokens,tokenizers,shakespeare,potts} (the whole cache is
# over the tool's 64 MiB; the image configs there use scikit-learn's digits). First run, 2026-11-26 on an
# H200: the probe took 105 s (pytest not finished in 72 s: give it 240 s beside the trainings with
# RUN_PYTEST=1); three 1,000-step runs sharing the GPU trained in 101-172 s, but their metric hooks did
# not finish in the next 200 s (since made cheaper; re-measure). 2026-11-26, one H100 (each call ~30 s to start):
# speed 208 s (hyperset_gpu 21, gpu_lm 105, cem_tiles 25, pytest 51), profile 261 s (its --compile step ran past
# 132 s), graphs 134 s. 2026-11-27, one H100: gather 293 s (CUDA tests of the gathered sums 37 s, gpu_lm eager 40 s and
# graphed 45 s at 1k and 4k, Hyper-SET eager 27 s, cem_tiles 27 s; every CUDA test needs over 100 s), gather2 74 s,
# compiled 266 s (Hyper-SET's compiled benchmark 102 s, CEM's 87 s, its tests 69 s).
#
# Outputs go to $OUT (default /tmp/gpu_out): at most 8 files (the device tool's limit): all.tgz holds
# every log and the runs' metrics; the page inputs are also copied out one by one.
# Then, here: copy gpu_lm.md to docs/results/cem/gpu_h100/gpu_lm_<commit>.md and hyperset_gpu.md to
# docs/results/hyperset/gpu_h100/gpu_throughput_<commit>.md (<commit>: the code that ran), name them in
# src/energyformer/report/pages.py (the pages' inputs and ARTIFACTS) and run `energyformer report`: the two
# GPU pages' verdicts for issues 20 and 21 then come from the new runs (the newest dated run decides).
set -u
PHASE=${1:?usage: gpu_checks.sh probe|speed|profile|graphs|compiled|next|next2|order|gather|gather2|stages|plateau|session|full [STEPS] [SECONDS]}
if [ "$PHASE" = full ]; then STEPS=${2:?full needs STEPS}; BUDGET=${3:-560}; else BUDGET=${2:-100}; fi
OUT=${OUT:-/tmp/gpu_out}
W=/tmp/gpu_work
mkdir -p "$OUT" "$W"
T0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
PY=${PY:-python3}
if [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then   # packages the device image lacks (pydantic, ...)
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$W/pip.txt" 2>&1 || { cat "$W/pip.txt"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
XDIST=$($PY -c "import xdist" > /dev/null 2>&1 && echo "-n 8")   # pytest-xdist where the image (or .whl) has it
export ENERGYFORMER_DATA=${ENERGYFORMER_DATA:-$PWD/data_cache}
pack() { cp "$OUT"/*.md "$W"/ 2>/dev/null; tar czf "$OUT/all.tgz" -C "$W" . 2>/dev/null; }
step() {  # step NAME SECONDS CMD...: run with a timeout (never past the phase's deadline), log to $W/NAME.txt
  local name=$1 secs=$2; shift 2
  local l; l=$(left); [ "$secs" -gt "$((l - 5))" ] && secs=$((l - 5))
  if [ "$secs" -lt 10 ]; then echo "== $name: skipped (phase deadline)" | tee -a "$W/steps.txt"; return; fi
  echo "== $name (timeout ${secs}s, $(left)s left)" | tee -a "$W/steps.txt"
  local t=$(date +%s)
  timeout "$secs" "$@" > "$W/$name.txt" 2>&1
  echo "== $name: rc $? in $(( $(date +%s) - t ))s" | tee -a "$W/steps.txt"
  tail -n 25 "$W/$name.txt"
  pack
}

# the plateau phase's trainings: the gpu scale's hyperset, transformer and hyperset_sigmoid, 1,000 steps at once
PLATEAU=(reproduce hyperset-sudoku --scale gpu --jobs 3 --runs /tmp/runs
         --only model=hyperset,transformer,hyperset_sigmoid
         --set train.steps=1000 --set train.eval_every=100 --set train.save_every=1000)
pack_runs() {  # the Sudoku runs' records and files (metrics.jsonl, run_info.json, config.yaml) to $OUT
  cp docs/results/hyperset/gpu/results.json "$OUT/results.json" 2>/dev/null
  (cd /tmp/runs 2>/dev/null && find . -name metrics.jsonl -o -name run_info.json -o -name config.yaml | \
    tar czf "$OUT/runs.tgz" -T - 2>/dev/null)
}

# every CUDA-marked test file of the kernels, the graphed step and the trainer (tests/train/test_cuda.py needs
# data_cache/{tokens,tokenizers,shakespeare,potts} carried)
CUDA_TESTS="tests/energies/test_cem_kernel_cuda.py tests/energies/test_hyperspherical_ops.py \
tests/energies/test_hyperspherical_ffkernel.py tests/energies/test_hyperspherical_kernel.py \
tests/benchmarks/test_lm_throughput.py"
[ -d data_cache/tokens ] && CUDA_TESTS="$CUDA_TESTS tests/train/test_cuda.py"

env_info() {  # the device, versions and which rms_norm kernels this build has, to $W/env.txt (both phases)
  { nvidia-smi; $PY -c "import torch, triton, pydantic; print('torch', torch.__version__, 'triton', triton.__version__,
'pydantic', pydantic.__version__, torch.cuda.get_device_name())
from energyformer.energies.hyperspherical_ops import FUSED_NORM; print('fused rms_norm kernel per device:', FUSED_NORM)"
  } > "$W/env.txt" 2>&1; cat "$W/env.txt" | tail -4
}
env_info

if [ "$PHASE" = probe ]; then
  step hyperset_gpu_bf16 60 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --out "$OUT/hyperset_gpu_probe.md"
  step pytest_cuda 120 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST $CUDA_TESTS
  cp "$W/pytest_cuda.txt" "$OUT/" 2>/dev/null
  pack; exit 0
fi

if [ "$PHASE" = speed ]; then
  step hyperset_gpu_bf16 75 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --keep-going --out "$OUT/hyperset_gpu.md"
  step gpu_lm_bf16 230 $PY benchmarks/gpu_lm.py --precisions bf16 --repeats 4 --warmup 1 --keep-going \
    --out "$OUT/gpu_lm.md"
  step cem_tiles 110 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32,32x64w8,128x32w8,64x64w8 --grid rows,heads \
    --causal-chunks 4,8 --budget 95 --out "$OUT/gpu_tiles.md"
  step pytest_cuda 200 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST $CUDA_TESTS
  cp "$W/pytest_cuda.txt" "$OUT/" 2>/dev/null
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = profile ]; then
  step profile_cem_1k 100 $PY benchmarks/gpu_profile.py --suite cem --keep-going --rows 25 \
    --models "Llama baseline;full CEM T=1 (auto path);paper configuration, one program per head (64 × 32)" \
    --out "$OUT/gpu_profile_cem_1k.md"
  step profile_cem_4k 70 $PY benchmarks/gpu_profile.py --suite cem --keep-going --rows 25 --setting 4096x2 \
    --models "Llama baseline;full CEM T=1 (auto path);full CEM T=1, head sums gathered" \
    --out "$OUT/gpu_profile_cem_4k.md"
  step profile_hyperset 70 $PY benchmarks/gpu_profile.py --suite hyperset --keep-going --rows 25 \
    --out "$OUT/gpu_profile_hyperset.md"
  step hyperset_gpu_compile 200 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --keep-going --compile --out "$OUT/hyperset_gpu_compile.md"
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = graphs ]; then
  step hyperset_gpu_graphs 80 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --keep-going --cuda-graph --out "$OUT/hyperset_gpu_graphs.md"
  step gpu_lm_graphs 120 $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --repeats 4 --warmup 1 \
    --keep-going --cuda-graph --models "full CEM T=1 (auto path);full CEM T=1, kernel with row tiles (grid rows)" \
    --out "$OUT/gpu_lm_graphs.md"
  step pytest_cuda 100 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST $CUDA_TESTS
  cp "$W/pytest_cuda.txt" "$OUT/" 2>/dev/null
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

compiled_steps() {  # compiled_steps SECONDS SECONDS: train.compile 'reduce-overhead' vs the graphed eager step,
  # Hyper-SET then full CEM T=1 at N 1k (first compiles take a while: two models per benchmark, warm-up 3)
  step hyperset_gpu_compiled "$1" $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 3 --keep-going --compile reduce-overhead --cuda-graph --models "Hyper-SET" \
    --out "$OUT/hyperset_gpu_compiled.md"
  step gpu_lm_compiled "$2" $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --repeats 4 --warmup 3 \
    --keep-going --compile reduce-overhead --cuda-graph --settings 1024x8 --models "full CEM T=1 (auto path)" \
    --out "$OUT/gpu_lm_compiled.md"
}

if [ "$PHASE" = compiled ]; then
  compiled_steps 200 200
  step pytest_cuda 150 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST tests/train/test_cuda.py \
    -k compiled
  cp "$W/pytest_cuda.txt" "$OUT/" 2>/dev/null
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = next ]; then   # what the H100 session of 2026-11-27 (code 855edd0) left: the model-size CUDA test
  # of the fastest launch timed (64 × 32 + key-tile 128 × 32 on 8 warps) and of product_order 'auto' without its
  # miscompiled dk, with every CEM kernel CUDA test (if they pass: the launch becomes the default, 'auto' is allowed
  # on CUDA); then where the eager steps' host time goes, in Python (gpu_profile.py --python: Hyper-SET's eager step
  # is 64 ms of wall on 20 ms of GPU work, the transformer's 35 on 20), and the kernels' rows of the same launches
  step pytest_cem 130 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST \
    tests/energies/test_cem_kernel_cuda.py tests/energies/test_sphere_overflow.py \
    tests/energies/test_hyperspherical_ffkernel.py tests/energies/test_hyperspherical_ops.py tests/core
  cp "$W/pytest_cem.txt" "$OUT/" 2>/dev/null
  # the sphere norm's overflow guard without host reads (2026-11-28; the read-per-call form was never timed):
  # Hyper-SET against the transformer, eager and as one CUDA graph per step (issue 20's 0.82x / 1.07x)
  step hyperset_eager 50 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --keep-going --models "Hyper-SET" --out "$OUT/hyperset_gpu_eager.md"
  step hyperset_graphs 50 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --keep-going --cuda-graph --models "Hyper-SET" --out "$OUT/hyperset_gpu_graphs.md"
  step python_hyperset 60 $PY benchmarks/gpu_profile.py --suite hyperset --keep-going --rows 12 --python 30 \
    --models "looped transformer;Hyper-SET" --out "$OUT/gpu_profile_python_hyperset.md"
  step python_cem_1k 70 $PY benchmarks/gpu_profile.py --suite cem --keep-going --rows 12 --python 30 \
    --models "Llama baseline;full CEM T=1 (auto path)" --out "$OUT/gpu_profile_python_cem_1k.md"
  step gpu_lm_graphs 120 $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --settings 1024x8,4096x2 \
    --repeats 5 --warmup 1 --keep-going --cuda-graph --models "full CEM T=1 (auto path);full CEM T=1, head sums \
gathered (64 × 32), key-tile kernel 128 × 32 (8 warps)" --out "$OUT/gpu_lm_graphs.md"
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = order ]; then   # product_order 'auto' on the GPU: which kernel's turned products break it (each
  # kernel's flag alone at the model's size, each case in its own process with CUDA_LAUNCH_BLOCKING), at N 1k × B 8
  # where 'auto' hit an illegal address and at B 2 where it gave wrong gradients
  step bisect_1k8 110 $PY scripts/cem_order_bisect.py --n 1024 --batch 8 --timeout 45 --out "$OUT/order_bisect_1k8.md"
  step bisect_1k2 80 $PY scripts/cem_order_bisect.py --n 1024 --batch 2 --timeout 30 --out "$OUT/order_bisect_1k2.md"
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = next2 ]; then   # the rest of what the session of 2026-11-27 left: train.compile's 'reduce-overhead'
  # against the graphed eager step for Hyper-SET and full CEM T=1 (the graph breaks fixed since), then its CUDA tests;
  # last, where Hyper-SET's eager step waits (its host table: the Triton launches the CPU's host timing cannot see)
  compiled_steps 110 100
  step pytest_compiled 100 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST tests/train/test_cuda.py \
    -k compiled
  cp "$W/pytest_compiled.txt" "$OUT/" 2>/dev/null
  step profile_hyperset 70 $PY benchmarks/gpu_profile.py --suite hyperset --keep-going --rows 25 \
    --models "looped transformer;Hyper-SET" --out "$OUT/gpu_profile_hyperset.md"
  # MHA2nd-lite's float32 q/k/v projection under bf16 autocast (fp32_heads, 2026-11-29): its cost against MHA and
  # against the projection in bf16, the intrinsic GPU page's size (docs/results/intrinsic/gpu/benchmark.md)
  step intrinsic_bf16 60 $PY benchmarks/intrinsic_attention.py --device cuda --bf16 --contexts 1024 --dim 512 \
    --layers 4 --heads 8 --batch 8 --reps 5 --warmup 1 --variants mha mha2nd_lite mha2nd_lite_bf16_heads \
    --json "$OUT/intrinsic_bf16.json"
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = gather ]; then   # issue 21's gathered head sums on the GPU: correctness first, then eager and
  # graphed tokens/s at 1k and 4k against the default launch, Hyper-SET's eager rows, the kernels alone at 4k
  step pytest_gather 80 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST \
    tests/energies/test_cem_kernel_cuda.py -k "gather or op"
  cp "$W/pytest_gather.txt" "$OUT/" 2>/dev/null
  step gpu_lm_eager 180 $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --settings 1024x8,4096x2 \
    --repeats 3 --warmup 1 --keep-going --models "full CEM T=1 (auto path);full CEM T=1, head sums gathered;full \
CEM T=1, head sums gathered, shared products in the operand dtype;full CEM T=1, all head sums gathered, shared \
products in the operand dtype" --out "$OUT/gpu_lm_eager.md"
  step gpu_lm_graphs 150 $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --settings 1024x8,4096x2 \
    --repeats 4 --warmup 1 --keep-going --cuda-graph --models "full CEM T=1 (auto path);full CEM T=1, head sums \
gathered, shared products in the operand dtype;full CEM T=1, all head sums gathered, shared products in the \
operand dtype" --out "$OUT/gpu_lm_graphs.md"
  step hyperset_gpu_eager 35 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 7 \
    --warmup 2 --keep-going --models "Hyper-SET;Hyper-SET, feed-forward norm and ReLU as two ops" \
    --out "$OUT/hyperset_gpu_eager.md"
  step cem_gather_4k 80 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32 --grid heads \
    --head-sums atomic,gather,gather_all --shared-dtype accumulation,operand --n 4096 --batch 2 --budget 70 \
    --out "$OUT/gpu_tiles_gather_4k.md"
  step pytest_cuda 100 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST $CUDA_TESTS
  cp "$W/pytest_cuda.txt" "$OUT/" 2>/dev/null
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = gather2 ]; then   # what a warm machine's last minutes allow after `gather`: the paper configuration
  # at 1k (blocked path, per-head factors on one program per head) and the 4k profile with the head sums gathered
  step gpu_lm_paper_1k 90 $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --settings 1024x8 --repeats 3 \
    --warmup 1 --keep-going --models "paper configuration (T=2, D+LR);paper configuration, one program per head \
(64 × 32);paper configuration, blocked path" --out "$OUT/gpu_lm_paper_1k.md"
  step profile_cem_4k 70 $PY benchmarks/gpu_profile.py --suite cem --keep-going --rows 25 --setting 4096x2 \
    --models "Llama baseline;full CEM T=1 (auto path);full CEM T=1, head sums gathered, shared products in the \
operand dtype" --out "$OUT/gpu_profile_cem_4k.md"
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = stages ]; then
  step cem_stages_1k 120 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32,128x32w8 --grid heads --num-stages 1,2,3 \
    --budget 110 --out "$OUT/gpu_tiles_stages_1k.md"
  step cem_stages_4k 120 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32,128x32w8 --grid heads --num-stages 1,2,3 \
    --n 4096 --batch 2 --budget 110 --out "$OUT/gpu_tiles_stages_4k.md"
  step cem_order_4k 80 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32 --grid heads,heads_inner \
    --n 4096 --batch 2 --budget 70 --out "$OUT/gpu_tiles_order_4k.md"
  # the paper configuration's per-head factors: the loop kernels (its default) against one program per head,
  # 4 and 8 causal chunks (the per-head products' FLOPs against their matmuls' count), at N 1k
  step cem_stack_1k 100 $PY benchmarks/cem_tiles.py --h-mode stack --tiles 16x64,64x32 --grid rows,heads \
    --causal-chunks 4,8 --budget 90 --out "$OUT/gpu_tiles_stack_1k.md"
  # the head sums gathered (_psum_h, kept for the backward) against the atomic ones, at 4k where the kernels dominate
  step cem_gather_4k 80 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32 --grid heads,heads_inner \
    --head-sums atomic,gather,gather_all --shared-dtype accumulation,operand --n 4096 --batch 2 --budget 70 \
    --out "$OUT/gpu_tiles_gather_4k.md"
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = plateau ]; then   # the three 1,000-step runs sharing the GPU, then their files
  step plateau 330 $PY -m energyformer.cli "${PLATEAU[@]}"
  pack_runs
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

if [ "$PHASE" = session ]; then   # the timed benchmarks alone on the GPU first, then the trainings and tests
  step hyperset_gpu_bf16 80 $PY benchmarks/hyperset_gpu.py --precisions bf16 --modes training --repeats 5 \
    --warmup 2 --keep-going --cuda-graph --models "Hyper-SET;Hyper-SET, attention.impl einsum" \
    --out "$OUT/hyperset_gpu.md"
  step gpu_lm_bf16 170 $PY benchmarks/gpu_lm.py --precisions bf16 --modes training --settings 1024x8,4096x2 \
    --repeats 4 --warmup 1 --keep-going --models "full CEM T=1 (auto path);full CEM T=1, head sums gathered;full \
CEM T=1, one program per head, heads launched inner;paper configuration (T=2, D+LR);paper configuration, one \
program per head (64 × 32);paper configuration, blocked path" --out "$OUT/gpu_lm.md"
  ( $PY -m energyformer.cli "${PLATEAU[@]}" > "$W/plateau.txt" 2>&1; echo "rc $?" >> "$W/plateau.txt" ) &
  SUD=$!
  step pytest_cuda 200 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST $CUDA_TESTS
  cp "$W/pytest_cuda.txt" "$OUT/" 2>/dev/null
  while kill -0 $SUD 2>/dev/null && [ "$(left)" -gt 12 ]; do sleep 3; done
  kill -0 $SUD 2>/dev/null && { echo "== plateau runs stopped at the phase deadline" | tee -a "$W/steps.txt";
    pkill -f "energyformer.cli reproduce"; pkill -f multiprocessing; sleep 2; }
  tail -n 30 "$W/plateau.txt"
  pack_runs
  pack; echo "== done in $(( $(date +%s) - T0 ))s"; exit 0
fi

# ---- full phase
if [ "$STEPS" = scale ]; then
  SETS=()
else
  EVAL=$((STEPS / 10))
  SETS=(--set train.steps="$STEPS" --set train.eval_every="$EVAL" --set train.save_every="$STEPS")
fi
# the two models of the scale's claims (the scale also admits hyperset_sigmoid and hyperset_negbeta:
# FULL_ONLY=model=... picks the labels)
( $PY -m energyformer.cli reproduce hyperset-sudoku --scale gpu --jobs "${JOBS:-2}" --runs /tmp/runs \
    --only "${FULL_ONLY:-model=hyperset,transformer}" "${SETS[@]}" ${EXTRA_SETS:-} > "$W/sudoku.txt" 2>&1
  echo "rc $?" >> "$W/sudoku.txt" ) &
SUD=$!
REF=
if [ -f .ref/ref_gpu.py ] && [ "$STEPS" != scale ]; then
  ( $PY .ref/ref_gpu.py hyper-set "$STEPS" "$OUT/released_hyperset_gpu.json" "$EVAL" > "$W/released.txt" 2>&1 ) &
  REF=$!
fi
if [ -n "${RUN_PYTEST:-}" ]; then   # RUN_PYTEST=1: the CUDA tests beside the trainings (correctness only)
  step pytest_cuda 240 $PY -m pytest -v -rf --tb=short -m cuda -p no:cacheprovider $XDIST $CUDA_TESTS
fi
TRAIN_DEADLINE=$((BUDGET - ${BENCH_SECONDS:-200}))   # keep this much for the benchmarks
while kill -0 $SUD 2>/dev/null || { [ -n "$REF" ] && kill -0 "$REF" 2>/dev/null; }; do
  if [ $(( $(date +%s) - T0 )) -gt $TRAIN_DEADLINE ]; then
    echo "== training past its deadline: stopped" | tee -a "$W/steps.txt"
    pkill -f "energyformer.cli reproduce"; pkill -f multiprocessing; pkill -f ref_gpu.py; sleep 3; break
  fi
  sleep 5
done
tail -n 30 "$W/sudoku.txt"; tail -n 3 "$W/released.txt" 2>/dev/null
pack_runs
pack
step hyperset_gpu 110 $PY benchmarks/hyperset_gpu.py --keep-going --out "$OUT/hyperset_gpu.md"
step gpu_lm_bf16 200 $PY benchmarks/gpu_lm.py --precisions bf16 --repeats 5 --warmup 2 --keep-going --out "$OUT/gpu_lm.md"
step cem_tiles 120 $PY benchmarks/cem_tiles.py --tiles 16x64,64x32,32x64w8,128x32w8,64x64w8 --grid rows,heads \
  --causal-chunks 4,8 --budget 105 --out "$OUT/gpu_tiles.md"
step gpu_lm_fp32 150 $PY benchmarks/gpu_lm.py --precisions fp32 --repeats 3 --warmup 1 --keep-going --out "$OUT/gpu_lm_fp32.md"
pack
echo "== done in $(( $(date +%s) - T0 ))s"
