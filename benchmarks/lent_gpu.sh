#!/usr/bin/env bash
# The checks for a lent GPU machine (16 cores, one GPU, no package index), as one script
# of about 8 minutes: the weak-scaling suite (QFT and random), a cluster of 2
# workers sharing the GPU on a 28-qubit state against the one GPU, and qsim's CUDA
# simulator beside dasq's GPU backend.
#
# It needs, carried with the working tree:
#   .whl/   the wheels of dasq's dependencies missing there (dask, distributed, zarr,
#           numcodecs, donfig, google-crc32c, partd, locket, tblib, zict, tornado,
#           dask-cuda, rapids-dask-dependency, qiskit, rustworkx, stevedore, dill),
#           fetched with `pip download --no-deps --only-binary=:all: --python-version 3.12 ...`
#   .qsim/  a qsim checkout's lib/ and apps/ (`git archive HEAD lib apps`)
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

if [ -n "${DRY:-}" ]; then
  QSIM=.qsim/apps/qsim_base.x DEV=cpu CLDEV=gpu-twin
  g++ -O3 -march=native -fopenmp -o $QSIM .qsim/apps/qsim_base.cc &
  SCALE=(--workers 1 2 --base-qubits 10) CL=(--qubits 12 --chunk-qubits 9) PEER=(--qubits 12 14)
else
  QSIM=/tmp/qsim_base_cuda.x DEV=gpu CLDEV=gpu
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/log.txt"
  (start=$(date +%s%N); nvcc -std=c++17 -O3 -arch=native -Wno-deprecated-gpu-targets -o $QSIM \
     .qsim/apps/qsim_base_cuda.cu >"$OUT/nvcc.txt" 2>&1
   echo "qsim build rc=$? ms=$((($(date +%s%N) - start) / 1000000))" >>"$OUT/nvcc.txt") &
  SCALE=(--workers 1 2 4 8 --base-qubits 24) CL=(--qubits 28 --chunk-qubits 25) PEER=(--qubits 26 28 30)
fi
BUILD=$!

# each part can be narrowed or skipped (an empty PARTS entry) for a second call
PARTS=${PARTS:-scaling gpucluster gpupeer}
read -r -a SCALING_ARGS <<<"${SCALING_ARGS:---circuits qft random --reps 3}"
read -r -a FUSED <<<"${FUSED:-2 4}"

[[ " $PARTS " == *" scaling "* ]] && { log "scaling"
timeout 210 $PY benchmarks/run.py scaling "${SCALE[@]}" "${SCALING_ARGS[@]}" --output scaling-lent$S \
  >>"$OUT/log.txt" 2>&1; log "scaling rc=$?"; keep scaling-lent$S; }

[[ " $PARTS " == *" gpucluster "* ]] && { log "gpucluster"
timeout 120 $PY benchmarks/run.py gpucluster --workers 2 "${CL[@]}" --circuits random qft --dtype complex128 \
  --reps 2 --device $CLDEV --output gpucluster$S >>"$OUT/log.txt" 2>&1; log "gpucluster rc=$?"; keep gpucluster$S; }

wait $BUILD; cat "$OUT/nvcc.txt" >>"$OUT/log.txt" 2>/dev/null
[[ " $PARTS " == *" gpupeer "* ]] && { log "gpupeer"
timeout 200 $PY benchmarks/run.py gpupeer --qsim-binary $QSIM --qsim-commit "${QSIM_COMMIT:-unknown}" \
  "${PEER[@]}" --circuits qft random --fused "${FUSED[@]}" --reps 3 --device $DEV --output gpupeer$S >>"$OUT/log.txt" 2>&1
log "gpupeer rc=$?"; keep gpupeer$S; }
true
