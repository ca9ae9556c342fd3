"""What this machine gives the course's code, in one line: cores, usable cores, torch's threads, and two
yardsticks timed here (a float32 matmul and a pure-Python loop), and how much slower it is than the
2-core machine the course's time budget was set on.

CI runs it before nbval, so that the budget holds the code, not the machine: the same chapter 6 took
141 s on one 2-core machine and 551 s on another (December 2026), with the same code.
``time_notebooks.py --machine`` scales its budget by the factor written here.

    python scripts/machine.py [--json _build/machine.json]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from bayesattn_lite.train import usable_cpus

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from sticky_markov import matmul_rate  # noqa: E402  (the benchmark's yardstick, timed the same way)

# The yardsticks on the machine the budget (5 min a notebook, 15 for the book) was last checked on:
# 2 cores, quiet, 2026-12-05 (151-196 GFLOPS and 42-43 ms in three runs; chapter 6 under nbval in 141 s).
REFERENCE = {"matmul_gflops": 180.0, "python_loop_ms": 43.0}


def matmul_gflops(n=1024):
    return matmul_rate((n, n), (n, n), torch.device("cpu"), repeats=20)


def python_loop_ms(n=1_000_000, repeats=20):
    """Best of ``repeats`` (after one warm-up) of a loop that only the interpreter runs."""
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        sum(i * i for i in range(n))
        times.append(time.perf_counter() - start)
    return 1e3 * min(times[1:])


def slowdown(measured, reference=REFERENCE):
    """How many times slower than the reference machine, by the mean of the two yardsticks' ratios;
    never below 1 (a faster machine keeps the budget as it is)."""
    ratios = (reference["matmul_gflops"] / measured["matmul_gflops"],
              measured["python_loop_ms"] / reference["python_loop_ms"])
    return max(1.0, sum(ratios) / len(ratios))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the measurements here (for time_notebooks.py --machine)")
    args = parser.parse_args(argv)
    measured = {"cores": os.cpu_count(), "usable_cores": usable_cpus(), "torch_threads": torch.get_num_threads(),
                "matmul_gflops": matmul_gflops(), "python_loop_ms": python_loop_ms()}
    measured["slowdown"] = slowdown(measured)
    print(f"machine: {measured['cores']} cores, {measured['usable_cores']} usable (affinity and CPU quota); torch "
          f"{torch.__version__} on {measured['torch_threads']} threads: float32 1024x1024 matmul "
          f"{measured['matmul_gflops']:.0f} GFLOPS, Python loop of 1e6 squares {measured['python_loop_ms']:.0f} ms; "
          f"{measured['slowdown']:.2f}x as slow as the budget's reference machine")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(measured, indent=1) + "\n")


if __name__ == "__main__":
    main()
