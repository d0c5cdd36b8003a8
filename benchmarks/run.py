"""dasq benchmarks: every contender runs the same circuit in the same precision on the same threads.

    python benchmarks/run.py inmemory --qubits 20 24 26 --circuits qft random --reps 3 [--old PATH]
    python benchmarks/run.py graph [--old PATH]
    python benchmarks/run.py relayout --qubits 22 --chunk-qubits 18
    python benchmarks/run.py planning
    python benchmarks/run.py outofcore --qubits 30 31 32 --memory-limit 4GiB
    python benchmarks/run.py diskfloor --qubits 30 31 32
    python benchmarks/run.py ooc --quick
    python benchmarks/run.py estimator [--qubits 16 --terms 40 --sets 4]
    python benchmarks/run.py density --qubits 10 12 13 --circuits qft random
    python benchmarks/run.py gpu --qubits 20 28 --circuits layers qft random   (needs a GPU)
    python benchmarks/run.py cluster --qubits 24 26 --circuits qft random qv --workers 2
    python benchmarks/run.py network --qubits 22 24 --rates 1gbit 5gbit   (root: network namespaces)
    python benchmarks/run.py fixedcost --qubits 16 --chunk-qubits 13 --reps 9
    python benchmarks/run.py cold --reps 5
    python benchmarks/run.py scaling --workers 1 2 4 8 --base-qubits 24   (needs 8+ cores)
    python benchmarks/run.py gpupeer --qsim-source PATH --qubits 26 28 30 32   (a GPU, nvcc, qsim)
    python benchmarks/run.py gpucluster --workers 2 --qubits 28   (a GPU, dask-cuda)
    python benchmarks/run.py sweeps --qubits 12 --sets 1000 --gradient-qubits 12 20 --threads 1
    python benchmarks/run.py stored_gradient --qubits 26 --memory-limit 1GiB --check
    python benchmarks/run.py dynamic --shots 1000 --reps 5 --threads 2

Each suite lives in its own module (benchmarks/inmemory.py, benchmarks/outofcore.py, ...: SUITES below) with
the children it starts (CHILDREN: each runs as ``python benchmarks/run.py _VERB ...``); this file only
parses the options and calls them. Each timed run happens in a fresh subprocess (so its peak RSS is its
own), contenders alternate A B C A B C, medians and ratios to the fastest peer are reported, and the memory
bandwidth (a plain copy of the state) is measured in the same run. Results go to
benchmarks/results/SUITE.json with the machine's details; benchmarks/README.md has the method and each
suite's current table. ``--old PATH`` adds a contender "dasq-old": the dasq of another checkout (``git
worktree add``), run side by side. Needs the `bench` extra (qiskit-aer, qsimcirq, psutil).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks.* of this checkout

from benchmarks import output  # noqa: E402 - after the path above
from benchmarks.gpu import DEFAULT_CONFIG as DEFAULT_TILE_CONFIG  # noqa: E402
from benchmarks.gpu import TileConfig  # noqa: E402

# suite -> (module of benchmarks/, its function): the function returns the payload that
# goes to results/SUITE.json (or --output), and writes its rows so far itself, if at all
SUITES = {
    "inmemory": ("inmemory", "suite_inmemory"),
    "relayout": ("relayout", "suite_relayout"),
    "relayout_scale": ("relayout_scale", "suite_relayout_scale"),
    "memory": ("memory", "suite_memory"),
    "kernels": ("kernels", "suite_kernels"),
    "graph": ("graph", "suite_graph"),
    "planning": ("planning", "suite_planning"),
    "estimator": ("estimator", "suite_estimator"),
    "density": ("density", "suite_density"),
    "diskfloor": ("diskfloor", "suite_diskfloor"),
    "outofcore": ("outofcore", "suite_outofcore"),
    "ooc": ("ooc", "suite_ooc"),
    "gpu": ("gpu", "suite_gpu"),
    "cluster": ("cluster", "suite_cluster"),
    "network": ("network", "suite_network"),
    "fixedcost": ("fixedcost", "suite_fixedcost"),
    "cold": ("cold", "suite_cold"),
    "scaling": ("scaling", "suite_scaling"),
    "gpupeer": ("gpupeer", "suite_gpupeer"),
    "gpucluster": ("gpucluster", "suite_gpucluster"),
    "sweeps": ("sweeps", "suite_sweeps"),
    "stored_gradient": ("stored_gradient", "suite_stored_gradient"),
    "dynamic": ("dynamic", "suite_dynamic"),
}

# a suite's child process -> (module, function): one timed run, its result printed as JSON
CHILDREN = {
    "_child": ("inmemory", "child"),
    "_memory": ("memory", "child"),
    "_graph": ("graph", "child"),
    "_estimator": ("estimator", "child"),
    "_density": ("density", "child"),
    "_ooc": ("outofcore", "child"),
    "_oocrate": ("ooc", "child"),
    "_gpu": ("gpu", "child"),
    "_gpupeer": ("gpupeer", "child"),
    "_sweeps": ("sweeps", "child"),
    "_stored_gradient": ("stored_gradient", "child"),
    "_dynamic": ("dynamic", "child"),
}


def _function(module: str, name: str):
    """Imported only when called: a child imports its own suite's module alone."""
    return getattr(importlib.import_module(f"benchmarks.{module}"), name)


def parser() -> argparse.ArgumentParser:
    """Every suite's options, and the children's (which the suites give them)."""
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="suite", required=True)
    ch = sub.add_parser("_child")
    ch.add_argument("--contender")
    ch.add_argument("--circuit")
    ch.add_argument("--qubits", type=int)
    ch.add_argument("--dtype")
    ch.add_argument("--fusion", type=int)
    ch.add_argument("--save")
    ch.add_argument("--cold", action="store_true")
    ch.add_argument("--dasq-path", default=None)
    gc = sub.add_parser("_graph")
    gc.add_argument("--contender")
    gc.add_argument("--method")
    gc.add_argument("--chunk-qubits", type=int)
    gc.add_argument("--dasq-path", default=None)
    ec = sub.add_parser("_estimator")
    ec.add_argument("--contender")
    for parser in (ec, sub.add_parser("estimator")):
        parser.add_argument("--qubits", type=int, default=16)
        parser.add_argument("--terms", type=int, default=40)
        parser.add_argument("--sets", type=int, default=4)
        parser.add_argument("--reps", type=int, default=5)
    dc, oc, orc, mc = (sub.add_parser(name) for name in ("_density", "_ooc", "_oocrate", "_memory"))
    for child in (dc, oc, orc, mc):  # one run of one circuit
        child.add_argument("--circuit")
        child.add_argument("--qubits", type=int)
        child.add_argument("--dtype")
    dc.add_argument("--contender")
    dc.add_argument("--save")
    ds = sub.add_parser("density")
    ds.add_argument("--qubits", type=int, nargs="+", default=[10, 12, 13])
    ds.add_argument("--circuits", nargs="+", default=["qft", "random"])
    ds.add_argument("--dtypes", nargs="+", default=["complex128"])
    ds.add_argument("--reps", type=int, default=3)
    gs = sub.add_parser("graph")
    gs.add_argument("--chunk-qubits-list", type=int, nargs="+", default=[2, 4, 6])
    gs.add_argument("--reps", type=int, default=3)
    gs.add_argument("--old", default=None, help="another checkout whose dasq runs side by side")
    oc.add_argument("--store")
    oc.add_argument("--memory-limit", type=int)
    for name in ("diskfloor",):
        f = sub.add_parser(name)
        f.add_argument("--qubits", type=int, nargs="+", default=[30, 31, 32])
        f.add_argument("--dtypes", nargs="+", default=["complex64"])
        f.add_argument("--directory", default=str(output.RESULTS / "tmp"))
    ooc = sub.add_parser("outofcore")
    ooc.add_argument("--qubits", type=int, nargs="+", default=[30, 31, 32])
    ooc.add_argument("--circuits", nargs="+", default=["qft", "random"])
    ooc.add_argument("--dtypes", nargs="+", default=["complex64"])
    ooc.add_argument("--memory-limit", default="4GiB")
    ooc.add_argument("--append", action="store_true", help="keep the rows already in outofcore.json")
    ooc.add_argument(
        "--directory", default=str(output.RESULTS / "tmp"), help="where the stores go (needs 2x the state)"
    )
    orc.add_argument("--store")
    orc.add_argument("--fraction", type=int)
    orc.add_argument("--threads", type=int, default=0)
    orc.add_argument("--device", default="cpu")
    orc.add_argument("--compression", default=None)
    rate = sub.add_parser("ooc")
    rate.add_argument("--quick", action="store_true", help="20-24 qubits complex128, budgets 1/4..1/64")
    rate.add_argument("--qubits", type=int, nargs="+", default=[24, 26, 28])
    rate.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    rate.add_argument("--fractions", type=int, nargs="+", default=[4, 16, 64], help="budget: state / F")
    rate.add_argument("--threads", type=int, default=0, help="threads sharing the budget (0: the cores)")
    rate.add_argument("--circuits", nargs="+", default=["layers", "qft"])
    rate.add_argument("--append", action="store_true", help="keep the rows already in ooc.json")
    rate.add_argument("--output", default="ooc", help="results/OUTPUT.json (ooc-before: another dasq's runs)")
    rate.add_argument("--directory", default=str(output.RESULTS / "tmp"), help="where the stores go")
    rate.add_argument("--device", default="cpu", help="where the blocks are computed: cpu or gpu")
    rate.add_argument("--compression", default=None, help="the stores' compression: zstd or blosc")
    ms = sub.add_parser("memory")
    ms.add_argument("--qubits", type=int, nargs="+", default=[26])
    ms.add_argument("--circuits", nargs="+", default=["qft", "random"])
    ms.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    gp, gpc = sub.add_parser("_gpu"), sub.add_parser("_gpupeer")
    for child in (gp, gpc):  # dasq on a GPU
        child.add_argument("--device")
        child.add_argument("--circuit")
        child.add_argument("--qubits", type=int)
        child.add_argument("--reps", type=int)
    gp.add_argument("--dtype")
    gp.add_argument("--save", default=None)
    gs2 = sub.add_parser("gpu")
    gs2.add_argument("--qubits", type=int, nargs="+", default=[20, 28, 30])
    gs2.add_argument("--circuits", nargs="+", default=["layers", "qft", "random"])
    gs2.add_argument("--output", default="gpu", help="results/OUTPUT.json")
    gs2.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    gs2.add_argument("--reps", type=int, default=5)
    gs2.add_argument("--cpu-reps", type=int, default=2)
    gs2.add_argument("--cpu-max-qubits", type=int, default=28)
    gs2.add_argument("--append", action="store_true", help="keep the rows already in gpu.json")
    gs2.add_argument("--check-max-qubits", type=int, default=26, help="compare GPU and CPU states up to this")
    ks = sub.add_parser("kernels")
    ks.add_argument("--kernel-qubits", type=int, default=22)
    ks.add_argument("--qubits", type=int, nargs=1, default=[22])
    ks.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    ks.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    ks.add_argument("--reps", type=int, default=3)
    rs = sub.add_parser("relayout_scale")
    rs.add_argument("--qubits", type=int, nargs=1, default=[22])
    rs.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096])
    rs.add_argument("--k", type=int, default=4)
    rs.add_argument("--workers", type=int, default=2)
    rs.add_argument("--reps", type=int, default=3)
    fc = sub.add_parser("fixedcost")
    fc.add_argument("--qubits", type=int, default=16)
    fc.add_argument("--chunk-qubits", type=int, default=13)
    fc.add_argument("--workers", type=int, default=2)
    fc.add_argument("--reps", type=int, default=9)
    fc.add_argument("--warm-rounds", type=int, default=2)
    fc.add_argument("--output", default="fixedcost", help="results/OUTPUT.json")
    co = sub.add_parser("cold")
    co.add_argument("--reps", type=int, default=5)
    cs = sub.add_parser("cluster")
    cs.add_argument("--qubits", type=int, nargs="+", default=[24, 26])
    cs.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    cs.add_argument("--dtypes", nargs="+", default=["complex128"])
    cs.add_argument("--workers", type=int, default=2)
    cs.add_argument("--reps", type=int, default=3)
    cs.add_argument("--warm-rounds", type=int, default=1, help="untimed rounds after the first run")
    cs.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 4096])
    cs.add_argument("--output", default="cluster", help="results/OUTPUT.json")
    cs.add_argument("--scheduler-only", action="store_true")
    nw = sub.add_parser("network")
    nw.add_argument("--qubits", type=int, nargs="+", default=[22, 24])
    nw.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    nw.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
    nw.add_argument("--rates", nargs="+", default=["1gbit", "5gbit"])
    nw.add_argument("--workers", type=int, default=2)
    nw.add_argument("--reps", type=int, default=3)
    nw.add_argument("--chunk-qubits", type=int, default=None, help="default: dasq's for the cluster")
    nw.add_argument("--output", default="network", help="results/OUTPUT.json")
    gpp = sub.add_parser("gpupeer")
    gpp.add_argument("--qubits", type=int, nargs="+", default=[26, 28, 30, 32])
    gpp.add_argument("--circuits", nargs="+", default=["layers", "qft"])
    gpp.add_argument("--fused", type=int, nargs="+", default=[2, 3, 4, 5], help="qsim's max fused sizes")
    gpp.add_argument("--reps", type=int, default=3)
    gpp.add_argument("--device", default="gpu", help="dasq's device (cpu for a dry run)")
    where = gpp.add_mutually_exclusive_group(required=True)
    where.add_argument("--qsim-source", help="a qsim checkout: apps/qsim_base_cuda.cu is built with nvcc")
    where.add_argument("--qsim-binary", help="qsim_base_cuda (or qsim_base) already built")
    gpp.add_argument("--qsim-commit", default=None, help="the qsim commit, for the results")
    gpp.add_argument("--output", default="gpupeer", help="results/OUTPUT.json")
    gcl = sub.add_parser("gpucluster")
    gcl.add_argument("--workers", type=int, default=2)
    gcl.add_argument("--qubits", type=int, default=28)
    gcl.add_argument("--circuits", nargs="+", default=["random", "qft"])
    gcl.add_argument("--dtype", default="complex128")
    gcl.add_argument("--chunk-qubits", type=int, default=25)
    gcl.add_argument("--reps", type=int, default=2)
    gcl.add_argument("--device", default="gpu", help="gpu, or gpu-twin for a dry run without a GPU")
    gcl.add_argument("--output", default="gpucluster", help="results/OUTPUT.json")
    for suite in ("sweeps", "stored_gradient", "dynamic"):
        _function(suite, "add_options")(sub)  # their choices come from the suites' modules
    sc = sub.add_parser("scaling")
    sc.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    sc.add_argument("--base-qubits", type=int, default=24, help="qubits at one worker (N = this + log2 W)")
    sc.add_argument("--circuits", nargs="+", default=["qft", "random", "qv"])
    sc.add_argument("--dtypes", nargs="+", default=["complex128"])
    sc.add_argument("--reps", type=int, default=3)
    sc.add_argument("--output", default="scaling", help="results/OUTPUT.json")
    for name in ("inmemory", "relayout", "planning"):
        s = sub.add_parser(name)
        s.add_argument("--qubits", type=int, nargs="+", default=[20, 24])
        s.add_argument("--circuits", nargs="+", default=["qft", "random"])
        s.add_argument("--dtypes", nargs="+", default=["complex64", "complex128"])
        s.add_argument("--reps", type=int, default=3)
        s.add_argument("--fusion", type=int, default=None)
        s.add_argument("--chunk-qubits", type=int, default=18)
        s.add_argument("--workers", type=int, default=2)
        s.add_argument("--old", default=None, help="another checkout whose dasq runs side by side")
    inm = sub.choices["inmemory"]
    inm.add_argument("--peers", nargs="+", choices=["aer", "qsim", "qulacs", "lightning"])
    inm.set_defaults(peers=["aer", "qsim", "qulacs", "lightning"])
    inm.add_argument("--qsim-fusions", type=int, nargs="+", default=[2, 3, 4, 5])
    inm.add_argument(
        "--qulacs-fusions",
        type=int,
        nargs="+",
        default=[0, 1, 2, 3],
        help="0: as given, 1: optimize_light, k: QuantumCircuitOptimizer.optimize(k)",
    )
    inm.add_argument("--append", action="store_true", help="keep the rows already in inmemory.json")
    inm.add_argument(
        "--isa",
        choices=["native", "avx2"],
        default="native",
        help="avx2: dasq and qsim without AVX-512 on an AVX-512 host (restrict_to_avx2)",
    )
    for tiled in (gp, gs2, gpc, gpp):  # the first configuration is the default's (benchmarks/gpu.py)
        tiled.add_argument(
            "--configs",
            nargs="+",
            type=lambda text: str(TileConfig.parse(text)),  # one name per configuration
            default=[DEFAULT_TILE_CONFIG],
            help="F/TILE/RUN bytes[/R[/RESIDENT]]",
        )
    return p


def main() -> None:
    args = parser().parse_args()
    if args.suite in CHILDREN:
        _function(*CHILDREN[args.suite])(args)
        return
    if getattr(args, "isa", "native") == "avx2":
        from benchmarks.machine import restrict_to_avx2

        restrict_to_avx2()  # before dasq (numba) is imported below: its fusion size follows
    if getattr(args, "fusion", None) is None:  # dasq's default on this machine (the CPU backend's)
        from dasq.backend.registry import get_backend
        from dasq.plan.fusion import default_fusion_size

        args.fusion = default_fusion_size(get_backend("cpu").preferred_fusion_size())
    payload = _function(*SUITES[args.suite])(args)
    print("wrote", output.write(getattr(args, "output", args.suite), payload))


if __name__ == "__main__":
    main()
