#!/usr/bin/python3
"""Latency of several TorchScript models side by side in PLAIN PyTorch, with
the rounds that other processes disturbed dropped and the figures that stay
disturbed flagged (issue 31: a single figure on a busy machine is a lottery).

Usage: speed_table.py MODEL [MODEL ...] --data DATA.npz [--batches 1,32]
                      [--threads 2] [--rounds 7] [--round-ms 100]
Output: one JSON object on stdout:
  {"threads": 2, "batches": [1, 32],
   "models": {MODEL: {"1": {"median_ms": .., "contended": false,
                             "rounds": 7, "dropped": 0}, ...}}}

Per batch size the models run in interleaved rounds (the order alternates),
each round as many calls of one model as fill about --round-ms. A round is
disturbed when the other processes of the machine took more than a fifth of
a core during it: /proc/stat's busy time of all CPUs minus this process's
own CPU time (getrusage), so this process's own threads (OpenMP, OpenBLAS)
never count. A disturbed round is dropped and run again, up to --rounds
more; a median with fewer than --rounds clean rounds is flagged
"contended": true, and callers print it as such, not as a fact.

A model's quantized engine (extra/tao_quant_meta.json) is selected before it
loads, as scripts/eval_torch.py does.
"""

import os

# LibTorch's intra-op threads are OpenMP's; Debian's OpenBLAS (pthread
# build) starts its own threads on the same cores, and the two pools
# oversubscribe them: the float CNN at batch 1 took 3.96 ms with them and
# 0.34 ms without (tao-quant's own C++ runs measure 0.39 ms). Set before
# numpy and torch load OpenBLAS; a caller's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from eval_torch import artifact_engine  # noqa: E402

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def system_busy_s():
    """Busy CPU seconds of the whole machine so far (all CPUs)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) * TICK_S


def own_cpu_s():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def timed_round(fn, calls):
    """(ms per call, True when other processes took > 0.2 core meanwhile)."""
    b0, c0, t0 = system_busy_s(), own_cpu_s(), time.perf_counter()
    for _ in range(calls):
        fn()
    wall = time.perf_counter() - t0
    others = (system_busy_s() - b0) - (own_cpu_s() - c0)
    # /proc/stat counts in clock ticks (10 ms): one tick of slack.
    return 1000.0 * wall / calls, others > 0.2 * wall + TICK_S


def measure(fns, rounds, round_ms):
    """Per function: (median ms, contended, rounds run, rounds dropped)."""
    for f in fns:  # warm-up: the profiling executor profiles, then compiles
        for _ in range(3):
            f()
    calls = []
    for f in fns:
        t0 = time.perf_counter()
        f()
        calls.append(max(1, int(round_ms / 1000.0 / max(time.perf_counter() - t0, 1e-6))))
    clean = [[] for _ in fns]
    every = [[] for _ in fns]
    run = dropped = 0
    while len(clean[0]) < rounds and run < 2 * rounds:
        order = range(len(fns)) if run % 2 == 0 else reversed(range(len(fns)))
        got, disturbed = {}, False
        for k in order:
            ms, d = timed_round(fns[k], calls[k])
            got[k] = ms
            disturbed = disturbed or d
        run += 1
        dropped += disturbed
        for k, ms in got.items():
            every[k].append(ms)
            if not disturbed:
                clean[k].append(ms)
    contended = len(clean[0]) < rounds
    out = []
    for k in range(len(fns)):
        times = every[k][-rounds:] if contended else clean[k]
        out.append((statistics.median(times), contended, run, dropped))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--round-ms", type=float, default=100.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    x = np.load(a.data)["x"]
    loaded = []
    for path in a.models:
        engine = artifact_engine(path)
        if engine:
            torch.backends.quantized.engine = engine
        loaded.append(torch.jit.load(path).eval())
    batches = [int(b) for b in a.batches.split(",") if b.strip()]
    result = {"threads": a.threads, "batches": batches, "models": {p: {} for p in a.models}}
    with torch.no_grad():
        for b in batches:
            reps = int(np.ceil(b / x.shape[0]))
            xb = torch.from_numpy(np.ascontiguousarray(np.concatenate([x] * reps)[:b]))
            fns = [lambda m=m: m(xb) for m in loaded]
            for path, (ms, contended, run, dropped) in zip(a.models, measure(fns, a.rounds, a.round_ms)):
                result["models"][path][str(b)] = {"median_ms": round(ms, 4), "contended": contended,
                                                  "rounds": run, "dropped": dropped}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
