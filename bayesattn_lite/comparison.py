"""The architecture comparison of chapter 8: train each model on each wind tunnel, score it in bits
against the exact posterior, and tabulate over seeds.

- ``train_on_task``  one (architecture, task, seed): the model from ``models.build``, trained by the
                     foundation's ``train.train`` (Adam, cross-entropy on the scored positions, a
                     fresh batch per step from ``task.sample`` seeded by ``wind_tunnels.data_seed``,
                     so a resumed run sees the same data), with checkpoints/resume and the divergence guard
- ``evaluate``       entropy error and KL in bits (``diagnostics``), accuracy, per-position error,
                     on held-out sequences, optionally at another horizon (``K=30`` for the HMM)
- ``compare``        every architecture x task x seed: one row (a dict) per run and horizon
- ``summarise``      mean and standard deviation over seeds, and ``format_table`` to print them

The table has no pandas dependency: rows are plain dicts, ``summarise`` groups them. The converged
models that ship with the course (their recipe, weights, records and verdicts) are ``converged``.
"""

import concurrent.futures
import math
import multiprocessing
import os
import time
from typing import Annotated

import numpy as np
import torch
import torch.nn.functional as F

from . import _validate, diagnostics, models, wind_tunnels
from ._types import Distinct, Flag, OneOf, Seed, SeedBelow, Seeds, Whole, checked, unchecked
from .train import Recipe, pick_device, seed_everything, train

Model = Annotated[torch.nn.Module, "models.build(...)"]   # in the message where one was expected

# Training batches come from wind_tunnels.data_seed(seed, step), far from these held-out seeds.
EVAL_SEED = 12345   # the held-out sequences every chapter scores on
CURVE_SEED = 54321  # the held-out sequences of the learning curves (not the ones scored at the end)


@checked
def run_name(arch: OneOf(models.ARCHITECTURES), task_name: OneOf(tuple(wind_tunnels.WIND_TUNNELS)), seed: Seed):
    """The name of a run's files, ``<arch>-<task>-seed<seed>`` (checkpoints, shipped weights, records)."""
    return f"{arch}-{task_name}-seed{seed}"


def _horizons(what, horizons):
    """Test horizons: a list or tuple of ``sample`` keyword dicts, e.g. [{"K": 30}]."""
    if not isinstance(horizons, (list, tuple)) or not all(isinstance(h, dict) for h in horizons):
        _validate.fail(what, 'a list of horizon dicts, e.g. [{"K": 30}]', horizons)
    return horizons


@checked
def task_loss(model: Model, batch: wind_tunnels.WindTunnelBatch):
    """Cross-entropy of the model's logits against the batch's targets on the scored positions
    (targets are samples of the hidden answer, so its minimiser is the exact posterior)."""
    logits = model(batch.tokens)
    try:   # a target out of range named, not torch's "Target 50 is out of bounds" (free when none is)
        return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=wind_tunnels.IGNORE_INDEX)
    except IndexError as exc:
        _validate.fail("batch.targets", f"class indices in [0, {logits.shape[-1]}) (the model's classes), or "
                       f"{wind_tunnels.IGNORE_INDEX} where a position is not scored", str(exc), described=True)


@checked
def train_on_task(arch, task, steps: Whole(0, wind_tunnels.MAX_STEPS - 1), seed: SeedBelow(wind_tunnels.MAX_SEED) = 0,
                  lr=3e-3, batch_size: Whole(1) = 32, device=None, checkpoint_path=None,
                  progress=None, log_every: Whole(1) = 10, optimizer="adam", schedule="constant", warmup=0,
                  clip_grad_norm=None, weight_decay=0.0, eval_every: Whole(1) | None = None, n_eval: Whole(1) = 256,
                  **model_sizes):
    """Build ``arch`` for ``task`` (an object or a name, CPU size) and train it; (model, history).

    The model's initialisation is seeded by ``seed``; so is its data stream. ``progress`` None
    means a bar unless BAYESATTN_PROGRESS=0. ``model_sizes`` override ``models.sizes(arch)``.
    ``optimizer``, ``schedule``, ``warmup``, ``clip_grad_norm`` and ``weight_decay`` go to
    ``train.train``. With ``eval_every`` (a multiple of ``log_every``) the history also has
    "eval_kl_bits", the KL to the posterior on ``n_eval`` held-out sequences (seed
    ``CURVE_SEED``, not the evaluation seed) every ``eval_every`` steps: the learning curve.
    """
    task = wind_tunnels.as_wind_tunnel(task)
    if eval_every is not None and eval_every % log_every:
        _validate.fail("eval_every", f"a positive multiple of log_every={log_every}", eval_every)
    device = pick_device(device)
    seed_everything(seed)
    model = models.build(arch, task.vocab_size, task.n_classes, **model_sizes).to(device)
    curve_batch = task.sample(n_eval, seed=CURVE_SEED).to(device) if eval_every else None

    @unchecked()   # a step's model and batch are made here: their types are not checked again each step
    def loss_fn(model, step):
        batch = task.sample(batch_size, seed=wind_tunnels.data_seed(seed, step)).to(device)
        return task_loss(model, batch)

    def learning_curve(model, step):
        if not eval_every or step % eval_every:
            return None
        with torch.no_grad():  # the weights before this step's update: the model after `step` updates
            return {"eval_kl_bits": diagnostics.kl_bits(model(curve_batch.tokens), curve_batch)}

    recipe = Recipe(steps, optimizer=optimizer, lr=lr, schedule=schedule, warmup=warmup,
                    clip_grad_norm=clip_grad_norm, weight_decay=weight_decay)
    history = train(model, loss_fn, recipe, device=device, log_every=log_every, on_step=learning_curve,
                    progress=True if progress is None else progress, checkpoint_path=checkpoint_path,
                    desc=f"{arch} on {task.name}, seed {seed}")
    return model, history


@torch.no_grad()
@checked
def evaluate(model: Model, task, n_seqs: Whole(1) = 256, seed=EVAL_SEED, **horizon):
    """Score ``model`` on ``n_seqs`` fresh sequences of ``task`` (``horizon``: e.g. K=30 for the HMM).

    Returns floats "entropy_error_bits" (Paper I's |H(model) - H(Bayes)|), "entropy_bias_bits"
    (the signed H(model) - H(Bayes): > 0 when the model is less confident than Bayes), "kl_bits"
    (KL(Bayes || model)), "accuracy" (argmax = true hidden answer), "bayes_accuracy" (the same for
    the exact posterior: the best any model can do) and "per_position_error_bits" and
    "per_position_kl_bits", (T,) arrays.
    """
    task = wind_tunnels.as_wind_tunnel(task)
    sizes = (getattr(model, "vocab_size", task.vocab_size), getattr(model, "n_classes", task.n_classes))
    if sizes != (task.vocab_size, task.n_classes):   # the course's models say what they were built for
        _validate.fail("model", f"a model built for {task.name!r} (vocab_size {task.vocab_size}, n_classes "
                       f"{task.n_classes})", f"one built for vocab_size {sizes[0]}, n_classes {sizes[1]}", described=True)
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
            "entropy_bias_bits": diagnostics.entropy_bias_bits(logits, batch).item(),
            "kl_bits": diagnostics.kl_bits(logits, batch).item(),
            "accuracy": right.item(), "bayes_accuracy": bayes_right.item(),
            "per_position_error_bits": diagnostics.per_position_error_bits(logits, batch).cpu().numpy(),
            "per_position_kl_bits": diagnostics.per_position_kl_bits(logits, batch).cpu().numpy()}


def horizon_label(horizon):
    """The label of a test horizon in rows and records: "trained" for {}, "K=30" for {"K": 30}."""
    if not isinstance(horizon, dict):
        _validate.fail("horizon", 'a dict of sample keywords, e.g. {"K": 30} ({} for the trained one)', horizon)
    return ", ".join(f"{k}={v}" for k, v in sorted(horizon.items())) or "trained"


@checked
def score(model, task, horizons: Distinct("horizons", "a horizon", "horizon") = (), n_seqs=256, seed=EVAL_SEED):
    """``evaluate`` at the trained horizon and at each of ``horizons`` (e.g. [{"K": 30}]), without the
    per-position arrays: {"trained": metrics, "K=30": metrics, ...}."""
    _horizons("horizons", horizons)
    out = {}
    for horizon in [{}] + list(horizons):
        metrics = evaluate(model, task, n_seqs=n_seqs, seed=seed, **horizon)
        metrics.pop("per_position_error_bits")
        metrics.pop("per_position_kl_bits")
        out[horizon_label(horizon)] = metrics
    return out


def _run_one(job):
    """One (task, arch, seed) of ``compare``: its rows and, if asked, the trained weights (a
    module-level function, so worker processes can import it)."""
    if job["threads"]:
        torch.set_num_threads(job["threads"])
    task = wind_tunnels.wind_tunnel(job["task"], job["size"])
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
    rows = [{**base, "horizon": label, **metrics}
            for label, metrics in score(model, task, horizons, n_seqs=job["n_eval"]).items()]
    weights = {k: v.cpu() for k, v in model.state_dict().items()} if job["keep_model"] else None
    return rows, weights


def model_sizes_for(arch, task, size="small", horizons=None, overrides=None):
    """The constructor sizes of ``arch`` for ``task`` (an object or a name) at ``size``:
    ``models.sizes`` with ``overrides``, and for position-embedded models a max_len that covers the
    longest sequence it will be evaluated on, at ``horizons`` (default: the task's
    ``test_horizons()``), unless max_len is overridden."""
    task = wind_tunnels.as_wind_tunnel(task, size)
    horizons = task.test_horizons() if horizons is None else _horizons("horizons", horizons)
    if overrides is not None and not isinstance(overrides, dict):
        _validate.fail("overrides", "a dict of size overrides, e.g. {'d_model': 64}, or None", overrides)
    overrides = dict(overrides or {})
    sizes = models.sizes(arch, size, **overrides)
    if "max_len" in sizes and "max_len" not in overrides:
        longest = max([task.sample(1, seed=0, **h).tokens.shape[1] for h in horizons] + [task.seq_len])
        sizes["max_len"] = max(longest, sizes["max_len"])
    return sizes


@checked
def compare(archs: Distinct("architectures", "an architecture", "architecture"),
            task_names: Distinct("tasks", "a task", "task"), seeds: Seeds, steps,
            size: OneOf("small", "paper") = "small", lr=3e-3, batch_size=32, n_eval: Whole(1) = 256,
            horizons: Annotated[dict, "{task: [horizon, ...]}, e.g. {'hmm': [{'K': 30}]}"] | None = None,
            device=None, checkpoint_dir=None, progress=False, model_sizes=None, keep_models: Flag = False,
            workers: Whole(1) = 1, threads: Whole(1) | None = None):
    """Train and evaluate every architecture x task x seed; a list of row dicts.

    Each row: arch, task, primitive, seed, horizon ("trained" or e.g. "K=30"), n_params, steps,
    final_loss, train_seconds and the metrics of ``evaluate`` (without the per-position array).
    ``horizons`` maps a task name to extra horizons to evaluate, e.g. {"hmm": [{"K": 30}]}.
    ``model_sizes`` maps an architecture to size overrides on top of ``models.sizes(arch, size)``
    (an override changes only what it names). With ``checkpoint_dir`` each run saves (and
    resumes from) ``<dir>/<run_name>.pt``. ``keep_models``: return (rows, models),
    models keyed by (arch, task, seed).

    ``workers`` > 1 runs that many CPU processes at once (each run is seeded on its own, so the
    rows are identical to ``workers=1``); ``threads`` sets torch's thread count in each run
    (default: 1 in worker processes, unchanged otherwise).
    """
    for what, names in (("archs", archs), ("task_names", task_names)):
        if isinstance(names, str) or not isinstance(names, (list, tuple)) or not names:
            _validate.fail(what, "a non-empty list of names (e.g. ['lstm'], not 'lstm')", names)
    for arch in archs:
        if arch not in models.ARCHITECTURES:
            _validate.fail("archs", f"names from {models.ARCHITECTURES}", arch)
    for name in task_names:
        if name not in wind_tunnels.WIND_TUNNELS:
            _validate.fail("task_names", f"names from {sorted(wind_tunnels.WIND_TUNNELS)}", name)
    checkpoint_dir = _validate.folder("checkpoint_dir", checkpoint_dir)
    if checkpoint_dir is not None and checkpoint_dir.exists() and not checkpoint_dir.is_dir():
        _validate.fail("checkpoint_dir", "None or a folder (made if missing)", f"{str(checkpoint_dir)!r}, a file",
                       described=True)
    if workers > 1 and pick_device(device).type != "cpu":
        _validate.fail("workers", "1 on a GPU (worker processes are for CPU runs)", workers)
    horizons, model_sizes = dict(horizons or {}), dict(model_sizes or {})
    for what, given, names in (("horizons", horizons, task_names), ("model_sizes", model_sizes, archs)):
        if set(given) - set(names):   # a misspelt key would be ignored without a word
            _validate.fail(what, f"keys among {list(names)}", sorted(map(str, set(given) - set(names))))
    jobs = []
    for name in task_names:
        task = wind_tunnels.wind_tunnel(name, size)
        for arch in archs:
            sizes = model_sizes_for(arch, task, size, horizons.get(name, []), model_sizes.get(arch))
            for seed in seeds:
                jobs.append({"task": name, "size": size, "arch": arch,
                             "seed": _validate.seed("seed", seed, wind_tunnels.MAX_SEED),
                             "steps": steps, "lr": lr, "batch_size": batch_size, "device": device,
                             "sizes": sizes, "horizons": horizons.get(name, []), "n_eval": n_eval,
                             "progress": progress, "keep_model": keep_models,
                             "threads": threads or (1 if workers > 1 else None),
                             "checkpoint_path": (os.path.join(checkpoint_dir, run_name(arch, name, seed) + ".pt")
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
        task = wind_tunnels.wind_tunnel(job["task"], size)
        model = models.build(job["arch"], task.vocab_size, task.n_classes, **job["sizes"])
        model.load_state_dict(weights)
        trained[job["arch"], job["task"], job["seed"]] = model.to(pick_device(device))
    return rows, trained


def _run(row):
    """What makes a row of ``compare`` one run's: two rows alike in these count one run twice."""
    return tuple(row[k] for k in ("arch", "task", "seed", "horizon")) + (row.get("variant"), row.get("n_params"))


@checked
def summarise(rows: Distinct("rows", "a row (one arch, task, seed and horizon)", "run", key=_run),
              metric="entropy_error_bits", by=("arch", "task", "horizon")):
    """Mean, standard deviation (ddof=1; 0 for one seed), min, max and count of ``metric`` over the
    rows sharing ``by``: a dict keyed by the tuple of those fields, in first-seen order."""
    if not isinstance(rows, (list, tuple)) or not rows or not all(isinstance(r, dict) for r in rows):
        _validate.fail("rows", "a non-empty list of row dicts from compare", rows)
    numeric = sorted(k for k, v in rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    if metric not in numeric:   # where the rows hold no number at all, they are not compare's rows
        _validate.fail("metric", f"a field of the rows holding numbers, one of {numeric}" if numeric else
                       f"a field of the rows holding numbers, but rows[0] has none among {sorted(rows[0])} "
                       "(rows from compare have 'entropy_error_bits')", metric)
    if isinstance(by, str) or not all(k in rows[0] for k in by):
        _validate.fail("by", f"a tuple of fields of the rows, from {sorted(rows[0])}", by)
    for i, row in enumerate(rows):   # rows of one table: each has what the first has
        if any(k not in row for k in (metric, *by)):
            _validate.fail(f"rows[{i}]", f"a row with {metric!r} and {list(by)}, as rows[0] has",
                           f"one without {[k for k in (metric, *by) if k not in row]}", described=True)
        if not isinstance(row[metric], (int, float)) or isinstance(row[metric], bool) or not math.isfinite(row[metric]):
            _validate.fail(f"rows[{i}][{metric!r}]", f"a finite number (the metric {metric!r})", row[metric])
    groups = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in by), []).append(row[metric])
    out = {}
    for key, values in groups.items():
        a = np.asarray(values, dtype=float)
        out[key] = {"mean": a.mean(), "std": a.std(ddof=1) if len(a) > 1 else 0.0,
                    "min": a.min(), "max": a.max(), "n": len(a)}
    return out


@checked
def format_table(rows, metric="entropy_error_bits", horizon="trained", digits: Whole(0) = 3):
    """A text table, architectures down, tasks across, 'mean ± std' of ``metric`` over seeds."""
    if not isinstance(rows, (list, tuple)) or not rows or not all(isinstance(r, dict) and "horizon" in r for r in rows):
        _validate.fail("rows", "a non-empty list of rows from compare (dicts with 'arch', 'task', 'horizon')", rows)
    horizons = list(dict.fromkeys(r["horizon"] for r in rows))
    if horizon not in horizons:
        _validate.fail("horizon", f"one of the rows' horizons {horizons}", horizon)
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
