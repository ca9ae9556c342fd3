"""Train one small configuration from each experimental chapter on CUDA and on the CPU, and compare.

    python scripts/gpu_check.py            # on a machine with a GPU: both devices, then a table
    python scripts/gpu_check.py --quick    # a few steps each (a smoke test)

For every configuration it checks that the run really happens on the GPU (the model's parameters
and optimiser state end up there, and a ``DeviceGuard`` sees no CPU tensor larger than a constant
enter a torch operation inside the training step), that the result agrees with the CPU run within
the stated tolerance, and prints the time per training step on both (after a warm-up run on the
GPU). Without CUDA it says so and runs the CPU side only. Exit status 1 if a check fails.

Configurations (chapter: what is trained):

- ch4  one attention head on the hidden-sources task, plain gradient descent (``specialisation``)
- ch5  the same head with the EM-like schedule (W_V at 10x), and Gaussian-mixture EM (``em.fit``)
- ch6  the sticky Markov chain, SGD against EM-like, two seeds at once (``experiments.em_vs_sgd``)
- ch7/8  a Transformer and a Mamba-style selective SSM on the bijection wind tunnel
         (``comparison.train_on_task``), scored in bits against the exact posterior

Tolerances: float32 training of a few hundred steps may drift by rounding (different kernels and
summation orders); the final metrics must agree to a relative 2e-3 (float64: 1e-9).

Known beforehand, from reading the code: ``em.fit`` creates its mixture weights on the CPU, so the
GMM row is expected to fail on CUDA until ``em`` puts them on ``x.device``.
"""

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, installed or not

from bayesattn_lite import attention  # noqa: E402

RTOL_FLOAT32, RTOL_FLOAT64 = 2e-3, 1e-9
SMALL = 64  # tensors up to this many elements may be CPU constants; anything larger is data or weights


class DeviceGuard(TorchFunctionMode):
    """Records torch operations that receive a non-trivial tensor on another device than ``device``.

    Active only inside a configuration's *hot* functions (its training step: the loss, the batched
    forward-backward, the EM steps), where everything should be on the device; data preparation
    and exact-Bayes references may legitimately run on the CPU outside them.
    """

    def __init__(self, device):
        super().__init__()
        self.device = torch.device(device)
        self.offenders = {}
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and t.device.type != self.device.type and t.numel() > SMALL:
                name = getattr(func, "__name__", str(func))
                self.offenders[name] = (tuple(t.shape), str(t.device))
        return func(*args, **kwargs)


@contextlib.contextmanager
def guarding(hot, guard):
    """Replace each (module, name) in ``hot`` by a version that runs under ``guard``."""
    depth = [0]

    def wrap(fn):
        def guarded(*args, **kwargs):
            if depth[0]:  # already inside a hot function
                return fn(*args, **kwargs)
            depth[0] += 1
            try:
                with guard:
                    return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
        return guarded

    originals = [(module, name, getattr(module, name)) for module, name in hot]
    for module, name, fn in originals:
        setattr(module, name, wrap(fn))
    try:
        yield guard
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)


@dataclass
class Outcome:
    metrics: dict            # name -> float, compared across devices
    seconds: float
    steps: int
    problems: list = field(default_factory=list)


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _module_on(model, optimizer_state, device):
    problems = [f"parameter {n} on {p.device}" for n, p in model.named_parameters() if p.device.type != device.type]
    for state in optimizer_state.values():
        problems += [f"optimizer state {k} on {v.device}" for k, v in state.items()
                     if isinstance(v, torch.Tensor) and v.dim() and v.device.type != device.type]
    return problems


@contextlib.contextmanager
def optimizer_spy():
    """Keep a handle on the optimizer a training loop makes, to inspect its state afterwards."""
    seen = {}
    original = torch.optim.Optimizer.step

    def step(opt, *args, **kwargs):
        seen["opt"] = opt
        return original(opt, *args, **kwargs)

    torch.optim.Optimizer.step = step
    try:
        yield seen
    finally:
        torch.optim.Optimizer.step = original


def _timed(on, fn, *args, **kwargs):
    """(fn(*args, **kwargs), seconds), the device ``on`` synchronised before and after."""
    _sync(on)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    _sync(on)
    return out, time.perf_counter() - start


# ----------------------------------------------------------------------------- the configurations

def head_on_sources(value_ratio, steps):
    """ch4 / ch5: the chapter's own run (``specialisation.run``), measurements included, on ``device``."""
    from bayesattn_lite import specialisation

    cfg = specialisation.Config.small(steps=steps, log_every=steps, value_ratio=value_ratio)

    def run(device):
        result, seconds = _timed(device, specialisation.run, cfg, 0, device=device)
        device_used = {p.device.type for p in result.model.parameters()}
        problems = [] if device_used == {"cpu"} else [f"the run's record is on {device_used}, not the CPU"]
        metrics = {"train loss": float(result.history["loss"][-1]),
                   "probe loss": float(result.history["probe_loss"][-1])}
        return Outcome(metrics, seconds, steps, problems)

    return run, RTOL_FLOAT32, [(attention, "loss")]


def gmm_em(steps):
    """ch5: EM for a Gaussian mixture on the task's observations (float64)."""
    from bayesattn_lite import em, specialisation

    cfg = specialisation.Config.small()

    def run(device):
        _, (x, _, _), _ = specialisation.make_data(cfg, seed=0)
        points = x.reshape(-1, x.shape[-1]).to(device, torch.float64)
        fit, seconds = _timed(device, em.fit, points, cfg.n_sources, n_iter=steps, seed=0)
        problems = [f"means on {fit.means.device}"] if fit.means.device.type != torch.device(device).type else []
        return Outcome({"log-likelihood": fit.log_likelihood[-1]}, seconds, steps, problems)

    return run, RTOL_FLOAT64, [(em, "e_step"), (em, "m_step")]


def sticky_markov(steps, T):
    """ch6: the paper's comparison, two seeds x {SGD, EM-like} in one batched run."""
    from bayesattn_lite import batched, experiments

    def run(device):
        result, seconds = _timed(device, experiments.em_vs_sgd, seeds=(42, 2024), steps=steps, T=T,
                                 device=device, progress=False)
        problems = [] if torch.device(result.run.device).type == torch.device(device).type else \
            [f"batched run reports device {result.run.device}"]
        metrics = {f"{name} loss, seed {seed}": float(v)
                   for name, values in (("sgd", result.final_loss_sgd), ("em", result.final_loss_em))
                   for seed, v in zip(result.seeds, values)}
        return Outcome(metrics, seconds, steps, problems)

    return run, RTOL_FLOAT32, [(batched, "forward_backward")]


def architecture(arch, task_name, steps):
    """ch7 / ch8: ``comparison.train_on_task`` (a model from ``models.build``, Adam, a fresh batch
    per step), scored against the exact posterior with ``comparison.evaluate``."""
    from bayesattn_lite import comparison

    def run(device):
        with optimizer_spy() as seen:
            (model, _), seconds = _timed(device, comparison.train_on_task, arch, task_name, steps, seed=0,
                                         device=device, progress=False, log_every=steps)
        problems = _module_on(model, seen["opt"].state if "opt" in seen else {}, torch.device(device))
        scores = comparison.evaluate(model, task_name, n_seqs=64)
        return Outcome({"entropy error (bits)": scores["entropy_error_bits"], "KL (bits)": scores["kl_bits"]},
                       seconds, steps, problems)

    return run, RTOL_FLOAT32, [(comparison, "task_loss")]


def configurations(quick):
    steps = {"head": 3 if quick else 200, "em": 3 if quick else 50, "sticky": 3 if quick else 100,
             "arch": 3 if quick else 100}
    T = 200 if quick else 1000
    yield "ch4 head, SGD", lambda: head_on_sources(1.0, steps["head"])
    yield "ch5 head, EM-like", lambda: head_on_sources(10.0, steps["head"])
    yield "ch5 GMM EM", lambda: gmm_em(steps["em"])
    yield "ch6 sticky Markov", lambda: sticky_markov(steps["sticky"], T)
    for arch in ("transformer", "mamba"):
        yield f"ch7/8 {arch}", lambda arch=arch: architecture(arch, "bijection", steps["arch"])


# ----------------------------------------------------------------------------- running and the table

def attempt(fn, device):
    try:
        return fn(device), None
    except ModuleNotFoundError as exc:
        return None, f"skipped: module {exc.name} is missing"
    except Exception as exc:  # noqa: BLE001 - reported in the table, the script goes on
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def check(label, make, accelerator=None):
    """One row: the CPU run and, on ``accelerator`` ("cuda"; None: none), a warm-up, a timed run, a
    guarded run and the comparison. (tests/test_scripts.py passes "cpu" to run the whole path.)"""
    try:
        fn, rtol, hot = make()
    except ModuleNotFoundError as exc:
        return {"label": label, "status": f"SKIP (module {exc.name} is missing)"}
    cpu, error = attempt(fn, "cpu")
    row = {"label": label, "rtol": rtol}
    if error:
        row["status"] = error if error.startswith("skipped") else f"FAIL on cpu: {error}"
        return row
    row.update(steps=cpu.steps, cpu=cpu.seconds / cpu.steps, metrics_cpu=cpu.metrics)
    if accelerator is None:
        row["status"] = "ok (cpu only)"
        return row
    attempt(fn, accelerator)  # warm-up: CUDA context, kernels, allocator
    gpu, error = attempt(fn, accelerator)
    if error:
        row["status"] = f"FAIL on {accelerator}: {error}"
        return row
    with guarding(hot, DeviceGuard(accelerator)) as guard:
        guarded, _ = attempt(fn, accelerator)
    row.update(gpu=gpu.seconds / gpu.steps, metrics_gpu=gpu.metrics)
    problems = list(gpu.problems) + [f"{op} got a {dev} tensor {shape}" for op, (shape, dev) in guard.offenders.items()]
    worst = max(abs(gpu.metrics[k] - v) / max(abs(v), 1e-12) for k, v in cpu.metrics.items())
    row["rel_diff"] = worst
    if worst > rtol:
        problems.append(f"cpu and {accelerator} differ by {worst:.2e} (relative) > {rtol:.0e}")
    if guarded is None:
        problems.append("the guarded run failed")
    elif not guard.calls:
        problems.append("the device guard saw no torch call: its hot functions were not used")
    row["status"] = "ok" if not problems else "FAIL: " + "; ".join(problems[:3])
    return row


def table(rows, cuda):
    head = f"{'configuration':<20} {'steps':>5} {'cpu s/step':>11} {'cuda s/step':>12} {'speed-up':>9} {'rel. diff':>10} {'tol':>6}  result"
    lines = [head, "-" * len(head)]
    for r in rows:
        cpu = f"{r['cpu']:.2e}" if "cpu" in r else "-"
        gpu = f"{r['gpu']:.2e}" if "gpu" in r else "-"
        speed = f"{r['cpu'] / r['gpu']:.1f}x" if "gpu" in r else "-"
        diff = f"{r['rel_diff']:.1e}" if "rel_diff" in r else "-"
        tol = f"{r['rtol']:.0e}" if "rtol" in r else "-"
        lines.append(f"{r['label']:<20} {r.get('steps', '-'):>5} {cpu:>11} {gpu:>12} {speed:>9} {diff:>10} {tol:>6}  {r['status']}")
    for r in rows:
        if "metrics_cpu" in r:
            values = ", ".join(f"{k} {v:.6f}" + (f" / {r['metrics_gpu'][k]:.6f}" if "metrics_gpu" in r else "")
                               for k, v in r["metrics_cpu"].items())
            lines.append(f"  {r['label']}: {values}" + ("  (cpu / cuda)" if cuda else ""))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps each (a smoke test)")
    parser.add_argument("--cpu-only", action="store_true", help="do not use CUDA even if present")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available() and not args.cpu_only
    if cuda:
        print(f"CUDA: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; CPU threads {torch.get_num_threads()}")
    else:
        print(f"CUDA is not available (torch {torch.__version__}): running the CPU side only, "
              f"{torch.get_num_threads()} CPU threads")
    rows = []
    for label, make in configurations(args.quick):
        rows.append(check(label, make, "cuda" if cuda else None))
        print(f"  {label}: {rows[-1]['status']}", flush=True)
    print()
    print(table(rows, cuda))
    failed = [r for r in rows if r["status"].startswith("FAIL")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
