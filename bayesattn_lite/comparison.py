"""The architecture comparison of chapter 8: train each model on each wind tunnel, score it in bits
against the exact posterior, and tabulate over seeds.

- ``train_on_task``  one (architecture, task, seed): the model from ``models.build``, trained by the
                     foundation's ``train.train`` (Adam, cross-entropy on the scored positions, a
                     fresh batch per step from ``task.sample`` seeded by (seed, step), so a resumed
                     run sees the same data), with checkpoints/resume and the divergence guard
- ``evaluate``       entropy error and KL in bits (``diagnostics``), accuracy, per-position error,
                     on held-out sequences, optionally at another horizon (``K=30`` for the HMM)
- ``compare``        every architecture x task x seed: one row (a dict) per run and horizon
- ``summarise``      mean and standard deviation over seeds, and ``format_table`` to print them

The table has no pandas dependency: rows are plain dicts, ``summarise`` groups them.
"""

import concurrent.futures
import math
import multiprocessing
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from . import diagnostics, models, tasks
from .train import pick_device, seed_everything, train

# Training batches are drawn with seed DATA_SEED_BASE + seed * 2**24 + step: one stream per seed,
# reproducible after a resume, and far from the evaluation seeds (12345 by default).
DATA_SEED_BASE = 2**40
MAX_STEPS = 2**24


def _fail(what, expected, given):
    raise ValueError(f"{what}: expected {expected}, got {given!r}")


def _task(task, size="cpu"):
    """A wind tunnel object, from itself or its name."""
    if isinstance(task, str):
        return tasks.wind_tunnel(task, size)
    if not all(hasattr(task, a) for a in ("sample", "vocab_size", "n_classes", "name")):
        _fail("task", f"a wind tunnel name {sorted(tasks.WIND_TUNNELS)} or task object", task)
    return task


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**16:
        _fail("seed", "an int in [0, 65536)", seed)
    return int(seed)


def task_loss(model, batch):
    """Cross-entropy of the model's logits against the batch's targets on the scored positions
    (targets are samples of the hidden answer, so its minimiser is the exact posterior)."""
    logits = model(batch.tokens)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=tasks.IGNORE_INDEX)


def train_on_task(arch, task, steps, seed=0, lr=3e-3, batch_size=32, device=None, checkpoint_path=None,
                  progress=None, log_every=10, **model_sizes):
    """Build ``arch`` for ``task`` (an object or a name, CPU size) and train it; (model, history).

    The model's initialisation is seeded by ``seed``; so is its data stream. ``progress`` None
    means a bar unless BAYESATTN_PROGRESS=0. ``model_sizes`` override ``models.default_sizes``.
    """
    task = _task(task)
    seed = _check_seed(seed)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 0 <= steps < MAX_STEPS:
        _fail("steps", f"an int in [0, {MAX_STEPS})", steps)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        _fail("batch_size", "an int >= 1", batch_size)
    device = pick_device(device)
    seed_everything(seed)
    model = models.build(arch, task.vocab_size, task.n_classes, **model_sizes).to(device)

    def loss_fn(model, step):
        batch = task.sample(batch_size, seed=DATA_SEED_BASE + seed * MAX_STEPS + step).to(device)
        return task_loss(model, batch)

    history = train(model, loss_fn, steps, optimizer="adam", lr=lr, device=device, log_every=log_every,
                    progress=True if progress is None else progress, checkpoint_path=checkpoint_path,
                    desc=f"{arch} on {task.name}, seed {seed}")
    return model, history


@torch.no_grad()
def evaluate(model, task, n_seqs=256, seed=12345, **horizon):
    """Score ``model`` on ``n_seqs`` fresh sequences of ``task`` (``horizon``: e.g. K=30 for the HMM).

    Returns floats "entropy_error_bits" (Paper I's |H(model) - H(Bayes)|), "kl_bits"
    (KL(Bayes || model)), "accuracy" (argmax = true hidden answer), "bayes_accuracy" (the same for
    the exact posterior: the best any model can do) and "per_position_error_bits", a (T,) array.
    """
    task = _task(task)
    if isinstance(n_seqs, bool) or not isinstance(n_seqs, (int, np.integer)) or n_seqs < 1:
        _fail("n_seqs", "an int >= 1", n_seqs)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        batch = task.sample(n_seqs, seed=seed, **horizon).to(device)
        logits = model(batch.tokens)
    finally:
        model.train(was_training)
    mask = batch.mask
    right = (logits.argmax(-1) == batch.targets)[mask].double().mean()
    bayes_right = (batch.posterior.argmax(-1) == batch.targets)[mask].double().mean()
    return {"entropy_error_bits": diagnostics.entropy_error_bits(logits, batch).item(),
            "kl_bits": diagnostics.kl_bits(logits, batch).item(),
            "accuracy": right.item(), "bayes_accuracy": bayes_right.item(),
            "per_position_error_bits": diagnostics.per_position_error_bits(logits, batch).cpu().numpy()}


def _horizon_label(horizon):
    return ", ".join(f"{k}={v}" for k, v in sorted(horizon.items())) or "trained"


def _run_one(job):
    """One (task, arch, seed) of ``compare``: its rows and, if asked, the trained weights (a
    module-level function, so worker processes can import it)."""
    if job["threads"]:
        torch.set_num_threads(job["threads"])
    task = tasks.wind_tunnel(job["task"], job["size"])
    arch, seed, horizons = job["arch"], job["seed"], job["horizons"]
    start = time.perf_counter()
    model, history = train_on_task(arch, task, job["steps"], seed=seed, lr=job["lr"],
                                   batch_size=job["batch_size"], device=job["device"],
                                   checkpoint_path=job["checkpoint_path"], progress=job["progress"],
                                   **job["sizes"])
    base = {"arch": arch, "task": task.name, "primitive": task.primitive, "seed": seed,
            "n_params": models.count_parameters(model), "steps": job["steps"],
            "final_loss": history.last("loss") if len(history) else math.nan,
            "train_seconds": time.perf_counter() - start}
    rows = []
    for horizon in [{}] + list(horizons):
        metrics = evaluate(model, task, n_seqs=job["n_eval"], **horizon)
        metrics.pop("per_position_error_bits")
        rows.append({**base, "horizon": _horizon_label(horizon), **metrics})
    weights = {k: v.cpu() for k, v in model.state_dict().items()} if job["keep_model"] else None
    return rows, weights


def _max_len(task, horizons, arch, sizes):
    """Position-embedded models need max_len >= the longest sequence they will be evaluated on."""
    if "max_len" not in models.default_sizes(arch) or "max_len" in sizes:
        return sizes
    longest = max([task.sample(1, seed=0, **h).tokens.shape[1] for h in horizons] + [task.seq_len])
    return {**sizes, "max_len": max(longest, models.default_sizes(arch)["max_len"])}


def compare(archs, task_names, seeds, steps, size="cpu", lr=3e-3, batch_size=32, n_eval=256,
            horizons=None, device=None, checkpoint_dir=None, progress=False, model_sizes=None,
            keep_models=False, workers=1, threads=None):
    """Train and evaluate every architecture x task x seed; a list of row dicts.

    Each row: arch, task, primitive, seed, horizon ("trained" or e.g. "K=30"), n_params, steps,
    final_loss, train_seconds and the metrics of ``evaluate`` (without the per-position array).
    ``horizons`` maps a task name to extra horizons to evaluate, e.g. {"hmm": [{"K": 30}]}.
    ``model_sizes`` maps an architecture to size overrides (default: ``models.default_sizes``;
    with size="paper", ``models.paper_sizes``). With ``checkpoint_dir`` each run saves (and
    resumes from) ``<dir>/<arch>-<task>-seed<seed>.pt``. ``keep_models``: return (rows, models),
    models keyed by (arch, task, seed).

    ``workers`` > 1 runs that many CPU processes at once (each run is seeded on its own, so the
    rows are identical to ``workers=1``); ``threads`` sets torch's thread count in each run
    (default: 1 in worker processes, unchanged otherwise).
    """
    for arch in archs:
        if arch not in models.ARCHITECTURES:
            _fail("archs", f"names from {models.ARCHITECTURES}", arch)
    for name in task_names:
        if name not in tasks.WIND_TUNNELS:
            _fail("task_names", f"names from {sorted(tasks.WIND_TUNNELS)}", name)
    if size not in ("cpu", "paper"):
        _fail("size", "'cpu' or 'paper'", size)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        _fail("workers", "an int >= 1", workers)
    if workers > 1 and pick_device(device).type != "cpu":
        _fail("workers", "1 on a GPU (worker processes are for CPU runs)", workers)
    horizons, model_sizes = dict(horizons or {}), dict(model_sizes or {})
    jobs = []
    for name in task_names:
        task = tasks.wind_tunnel(name, size)
        for arch in archs:
            sizes = model_sizes.get(arch, models.paper_sizes(arch) if size == "paper" else {})
            sizes = _max_len(task, horizons.get(name, []), arch, sizes)
            for seed in seeds:
                jobs.append({"task": name, "size": size, "arch": arch, "seed": _check_seed(seed),
                             "steps": steps, "lr": lr, "batch_size": batch_size, "device": device,
                             "sizes": sizes, "horizons": horizons.get(name, []), "n_eval": n_eval,
                             "progress": progress, "keep_model": keep_models,
                             "threads": threads or (1 if workers > 1 else None),
                             "checkpoint_path": (os.path.join(checkpoint_dir, f"{arch}-{name}-seed{seed}.pt")
                                                 if checkpoint_dir else None)})
    if workers == 1:
        results = [_run_one(job) for job in jobs]
    else:  # spawn, not fork: a forked torch (or Jupyter kernel) can deadlock
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = list(pool.map(_run_one, jobs))
    rows = [row for job_rows, _ in results for row in job_rows]
    if not keep_models:
        return rows
    trained = {}
    for job, (_, weights) in zip(jobs, results):
        task = tasks.wind_tunnel(job["task"], size)
        model = models.build(job["arch"], task.vocab_size, task.n_classes, **job["sizes"])
        model.load_state_dict(weights)
        trained[job["arch"], job["task"], job["seed"]] = model.to(pick_device(device))
    return rows, trained


def summarise(rows, metric="entropy_error_bits", by=("arch", "task", "horizon")):
    """Mean, standard deviation (ddof=1; 0 for one seed), min, max and count of ``metric`` over the
    rows sharing ``by``: a dict keyed by the tuple of those fields, in first-seen order."""
    if not rows:
        _fail("rows", "a non-empty list of rows from compare", rows)
    if metric not in rows[0]:
        _fail("metric", f"one of {sorted(k for k, v in rows[0].items() if isinstance(v, float))}", metric)
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in by), []).append(row[metric])
    out = {}
    for key, values in groups.items():
        a = np.asarray(values, dtype=float)
        out[key] = {"mean": a.mean(), "std": a.std(ddof=1) if len(a) > 1 else 0.0,
                    "min": a.min(), "max": a.max(), "n": len(a)}
    return out


def format_table(rows, metric="entropy_error_bits", horizon="trained", digits=3):
    """A text table, architectures down, tasks across, 'mean ± std' of ``metric`` over seeds."""
    stats = summarise([r for r in rows if r["horizon"] == horizon], metric)
    archs = list(dict.fromkeys(k[0] for k in stats))
    names = list(dict.fromkeys(k[1] for k in stats))
    width = 8 + 2 * digits
    lines = [f"{'':12s}" + "".join(f"{n:>{width + 3}s}" for n in names)]
    for arch in archs:
        cells = []
        for name in names:
            s = stats.get((arch, name, horizon))
            cells.append(f"{s['mean']:{width - digits - 2}.{digits}f} ± {s['std']:.{digits}f}" if s else "-")
        lines.append(f"{arch:12s}" + "".join(f"{c:>{width + 3}s}" for c in cells))
    return "\n".join(lines)
