"""What this machine gives the course's code, in one line: cores, usable cores, torch's threads, and two
yardsticks timed here (a float32 matmul and a pure-Python loop).

CI prints it before the tests, so that times from two CI runs can be compared: the same notebook took
141 s on one 2-core machine and 551 s on another (December 2026), with the same code. A notebook's
time divided by the yardsticks' is what the code did; the yardsticks are what the machine did.

    python scripts/machine.py
"""

import os
import time

import torch

from bayesattn_lite.train import usable_cpus


def best_of(fn, repeats=5):
    fn()  # warm-up: the first call allocates
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def matmul_gflops(n=1024):
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / best_of(lambda: a @ b) / 1e9


def python_loop_ms(n=1_000_000):
    return 1e3 * best_of(lambda: sum(i * i for i in range(n)))


def main():
    print(f"machine: {os.cpu_count()} cores, {usable_cpus()} usable (affinity and CPU quota); torch "
          f"{torch.__version__} on {torch.get_num_threads()} "
          f"threads: float32 1024x1024 matmul {matmul_gflops():.0f} GFLOPS, Python loop of 1e6 squares "
          f"{python_loop_ms():.0f} ms")


if __name__ == "__main__":
    main()
