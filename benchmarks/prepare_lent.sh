#!/usr/bin/env bash
# Before a lease of a GPU machine (no package index there): fill what lent_gpu.sh needs
# carried with the working tree, here, where the registries are reachable.
#   .whl/   the wheels of dasq's dependencies the lent machine lacks, at the versions of
#           the Python environment this runs in (the code the tests passed on), built for
#           the lent machine's Python (LENT_PYTHON, default 3.12) on x86_64 Linux;
#   .qsim/  qsim's lib/ and apps/ at the HEAD of the repository given (a clone or
#           a fetched mirror of github.com/quantumlib/qsim), its commit in .qsim/COMMIT.
# Both are ignored by git: name them in the device run's carry (".whl", ".qsim"). About
# 25 MiB in all, under the 64 MiB a run carries.
#
#   benchmarks/prepare_lent.sh QSIM_GIT_DIR
set -euo pipefail
QSIM_REPO=$(cd "${1:-/nonexistent}" 2>/dev/null && pwd) || QSIM_REPO=""  # before the cd below
cd "$(dirname "$0")/.."
if [ $# -ne 1 ] || [ -z "$QSIM_REPO" ] || ! git -C "$QSIM_REPO" rev-parse -q --verify HEAD >/dev/null 2>&1; then
  echo "usage: benchmarks/prepare_lent.sh QSIM_GIT_DIR (a clone of qsim, or its git directory)" >&2
  exit 2
fi
PY=${PY:-python3}
MISSING=(dask distributed zarr numcodecs donfig google-crc32c partd locket tblib zict tornado
  qiskit rustworkx stevedore dill)
pins=()
for name in "${MISSING[@]}"; do
  version=$($PY -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name") || {
    echo "$name is not installed in $($PY -c 'import sys; print(sys.prefix)'): install dasq[test] first" >&2
    exit 1
  }
  pins+=("$name==$version")
done
rm -rf .whl .qsim
mkdir -p .whl .qsim
$PY -m pip download -q --no-deps --only-binary=:all: --python-version "${LENT_PYTHON:-3.12}" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d .whl "${pins[@]}"
git -C "$QSIM_REPO" archive HEAD lib apps | tar -x -C .qsim
git -C "$QSIM_REPO" rev-parse --short HEAD >.qsim/COMMIT
echo "$(ls .whl | wc -l) wheels in .whl ($(du -sh .whl | cut -f1)); qsim $(cat .qsim/COMMIT) in .qsim ($(du -sh .qsim | cut -f1))"
