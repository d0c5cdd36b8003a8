#!/usr/bin/env bash
# The checks for a lent GPU machine (16 cores, one GPU, no package index), as one script
# of at most about 9.5 minutes (on a fresh machine the tests take 2-3 of them: cupy
# compiles every kernel in each test worker): the GPU backend's operation tests on the
# GPU, qsim's CUDA simulator beside dasq's GPU backend at each tile configuration
# (gpupeer, 26-32 qubits), the gpu suite (tile configurations at 20 qubits: host time
# per group, passes, remaps, roofline, states against the CPU backend), then Nsight
# Compute on two tile passes (profile), then where a warm run's host time goes at 20
# qubits (host). PARTS=ooc: a stored run streamed through the GPU (28 qubits
# complex64, a quarter-state budget).
#
# It needs, carried with the working tree (benchmarks/prepare_lent.sh makes both):
#   .whl/   the wheels of dasq's dependencies missing there (dask, distributed, zarr,
#           numcodecs, donfig, google-crc32c, partd, locket, tblib, zict, tornado,
#           qiskit, rustworkx, stevedore, dill)
#   .qsim/  a qsim checkout's lib/ and apps/, and its commit in .qsim/COMMIT
# and writes the results JSON (benchmarks/results/) and a log to $OUT as well.
# DRY=1 runs it all at toy sizes on a machine without a GPU (dasq on cpu/gpu-twin,
# qsim's CPU app), to try the script before a lease.
set -u
OUT=${OUT:-/tmp/dasq-lent}
S=${DRY:+-dry}  # a dry run's results are named *-dry.json
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DASQ_BENCH_COMMIT=${DASQ_BENCH_COMMIT:-unknown}
PY=${PY:-python3}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/log.txt"; }
keep() { cp benchmarks/results/"$1".json "$OUT/" 2>/dev/null || true; }

if [ -d .whl ] && [ -z "${DRY:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
log "python $($PY -V 2>&1), $(nproc) cores"
$PY -c "import dask, distributed, zarr, numba, dasq; print('dask', dask.__version__, 'numba', numba.__version__)" 2>&1 | tee -a "$OUT/log.txt"

# the tile configurations F/TILE_BYTES/RUN_BYTES/R/RESIDENT timed (the first: dasq's default,
# 32 amplitudes per thread, 168 registers; /4/768: 16 per thread, 80 registers, a fifth
# more remaps on layered circuits). Also measured, slower on the layered circuits at 26-32 qubits:
# 2/65536/64/4/512 (tiles of 13 bits, at bcd8c1c) and 2/32768/64/4/512 (at 669be91)
read -r -a CONFIGS <<<"${CONFIGS:-2/32768/64/5/384 2/32768/64/4/768}"
if [ -n "${DRY:-}" ]; then
  QSIM=.qsim/apps/qsim_base.x DEV=cpu
  g++ -O3 -march=native -fopenmp -o $QSIM .qsim/apps/qsim_base.cc &
  GPU=(--qubits 10 --check-max-qubits 0 --cpu-max-qubits 10) PEER=(--qubits 12 14) TESTDEV=gpu-twin XDIST=()
  OOC=(--qubits 16 --dtypes complex64 --fractions 4 --circuits layers --device cpu)
else
  QSIM=/tmp/qsim_base_cuda.x DEV=gpu
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$OUT/log.txt"
  (start=$(date +%s%N); nvcc -std=c++17 -O3 -arch=native -Wno-deprecated-gpu-targets -o $QSIM \
     .qsim/apps/qsim_base_cuda.cu >"$OUT/nvcc.txt" 2>&1
   echo "qsim build rc=$? ms=$((($(date +%s%N) - start) / 1000000))" >>"$OUT/nvcc.txt") &
  read -r -a GPUQ <<<"${GPU_QUBITS:-20}"
  GPU=(--qubits "${GPUQ[@]}" --check-max-qubits 20 --cpu-max-qubits ${CPU_MAX:-20}) PEER=(--qubits 26 28 30 32) TESTDEV=gpu
  OOC=(--qubits 28 --dtypes complex64 --fractions 4 --circuits layers --device gpu)
  XDIST=(-n "${TEST_WORKERS:-12}")
fi
BUILD=$!

# each part can be narrowed or skipped (an empty PARTS entry) for a second call
PARTS=${PARTS:-tests gpupeer gpu profile host}  # ooc: a stored run through the GPU (PARTS=ooc)

[[ " $PARTS " == *" tests "* ]] && { log "tests on $TESTDEV"
timeout ${TESTS_TIMEOUT:-170} $PY -m pytest -q -x -p no:cacheprovider "${XDIST[@]}" \
  ${TESTS:-tests/test_gpu_backend.py tests/test_operations_reference.py} -k "$TESTDEV" >>"$OUT/tests.txt" 2>&1
log "tests rc=$? $(tail -1 "$OUT/tests.txt")"; }

wait $BUILD; cat "$OUT/nvcc.txt" >>"$OUT/log.txt" 2>/dev/null
[[ " $PARTS " == *" gpupeer "* ]] && { log "gpupeer"
timeout ${PEER_TIMEOUT:-230} $PY benchmarks/run.py gpupeer --qsim-binary $QSIM --qsim-commit "${QSIM_COMMIT:-$(cat .qsim/COMMIT 2>/dev/null || echo unknown)}" \
  "${PEER[@]}" --circuits layers qft --fused ${FUSED:-3 4} --reps 2 --device $DEV --configs "${CONFIGS[@]}" \
  --output gpupeer$S >>"$OUT/log.txt" 2>&1
log "gpupeer rc=$?"; keep gpupeer$S; }

[[ " $PARTS " == *" ooc "* ]] && { log "ooc"
timeout ${OOC_TIMEOUT:-140} $PY benchmarks/run.py ooc "${OOC[@]}" --output ooc-gpu$S >>"$OUT/log.txt" 2>&1
log "ooc rc=$?"; keep ooc-gpu$S; }

[[ " $PARTS " == *" gpu "* ]] && [ -z "${DRY:-}" ] && { log "gpu"
read -r -a GPU_EXTRA <<<"${GPU_EXTRA:-}"
timeout ${GPU_TIMEOUT:-100} $PY benchmarks/run.py gpu "${GPU[@]}" "${GPU_EXTRA[@]}" --circuits layers qft random --dtypes complex64 \
  --reps 3 --cpu-reps 1 --configs "${CONFIGS[@]:0:${GPU_CONFIGS:-2}}" --output gpu$S >>"$OUT/log.txt" 2>&1; log "gpu rc=$?"; keep gpu$S; }

[[ " $PARTS " == *" host "* ]] && { log "host"
# where a warm run's host time goes at 20 qubits (the fixed part beside the per-group
# part of host_us_per_group): cProfile of simulate, the run's device time by events
timeout ${HOST_TIMEOUT:-40} $PY - "$DEV" ${HOST_QUBITS:-20} >"$OUT/host.txt" 2>&1 <<'PYTHON'
import cProfile, pstats, sys, time
import dasq
from benchmarks import circuits
device, n = sys.argv[1], int(sys.argv[2])
for name in ("qft", "layers"):
    circuit = circuits.to_dasq(getattr(circuits, name)(n))
    for _ in range(3):
        dasq.simulate(circuit, device=device, dtype="complex64").norm()
    started = time.perf_counter()
    state = dasq.simulate(circuit, device=device, dtype="complex64")
    host = time.perf_counter() - started
    state.norm()
    ran = time.perf_counter() - started
    again = time.perf_counter()
    state.norm()  # the device idle: the read-out's own cost
    again = time.perf_counter() - again
    print(f"{name} {n}: host {1e3 * host:.3f} ms, with norm() {1e3 * ran:.3f} ms, norm() again {1e3 * again:.3f} ms")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(10):
        dasq.simulate(circuit, device=device, dtype="complex64")
    profile.disable()
    dasq.simulate(circuit, device=device, dtype="complex64").norm()
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
PYTHON
log "host rc=$? $(grep -E '^(qft|layers) ' "$OUT/host.txt" | tr '\n' ';')"; }

[[ " $PARTS " == *" profile "* ]] && [ -z "${DRY:-}" ] && { log "profile"
# Nsight Compute on two tile passes of the layered circuit at 28 qubits (after three
# warm ones): where a pass's time goes (memory, shared memory, issue, occupancy)
if command -v ncu >/dev/null; then
  timeout ${PROFILE_TIMEOUT:-60} ncu --kernel-name tile_pass --launch-skip 3 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section Occupancy --section SchedulerStats --section WarpStateStats \
    $PY -c "import dasq; from benchmarks import circuits; c = circuits.to_dasq(circuits.layers(28)); \
dasq.simulate(c, device='gpu', dtype='complex64').norm()" >"$OUT/ncu.txt" 2>&1
  log "profile rc=$? $(grep -c 'tile_pass' "$OUT/ncu.txt") sections"
else log "profile: no ncu"; fi; }

true
