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
- ``train_converged`` one run with the converged recipe (``RECIPE``, ``CONVERGED_STEPS``): AdamW,
                     warm-up + cosine, clipping, a held-out learning curve; the run
                     ``scripts/train_wind_tunnels.py`` makes for every architecture x task x seed
- ``load_pretrained`` the model such a run wrote into the package's data folder (``pretrained/``),
                     and ``load_record`` its JSON record (recipe, seconds, learning curve, metrics)

The table has no pandas dependency: rows are plain dicts, ``summarise`` groups them.
"""

import concurrent.futures
import json
import math
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import _validate, diagnostics, models, wind_tunnels
from .train import pick_device, seed_everything, train

# Training batches are drawn with seed DATA_SEED_BASE + seed * 2**24 + step: one stream per seed,
# reproducible after a resume, and far from the evaluation seeds (12345 by default).
DATA_SEED_BASE = 2**40
MAX_STEPS = 2**24
EVAL_SEED = 12345   # the held-out sequences every chapter scores on
CURVE_SEED = 54321  # the held-out sequences of the learning curves (not the ones scored at the end)


def _task(task, size="cpu"):
    """A wind tunnel object, from itself or its name."""
    if isinstance(task, str):
        return wind_tunnels.wind_tunnel(task, size)
    if not all(hasattr(task, a) for a in ("sample", "vocab_size", "n_classes", "name")):
        _validate.fail("task", f"a wind tunnel name {sorted(wind_tunnels.WIND_TUNNELS)} or task object", task)
    return task


def task_loss(model, batch):
    """Cross-entropy of the model's logits against the batch's targets on the scored positions
    (targets are samples of the hidden answer, so its minimiser is the exact posterior)."""
    logits = model(batch.tokens)
    return F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=wind_tunnels.IGNORE_INDEX)


def train_on_task(arch, task, steps, seed=0, lr=3e-3, batch_size=32, device=None, checkpoint_path=None,
                  progress=None, log_every=10, optimizer="adam", schedule="constant", warmup=0,
                  clip_grad_norm=None, weight_decay=0.0, eval_every=None, n_eval=256, **model_sizes):
    """Build ``arch`` for ``task`` (an object or a name, CPU size) and train it; (model, history).

    The model's initialisation is seeded by ``seed``; so is its data stream. ``progress`` None
    means a bar unless BAYESATTN_PROGRESS=0. ``model_sizes`` override ``models.default_sizes``.
    ``optimizer``, ``schedule``, ``warmup``, ``clip_grad_norm`` and ``weight_decay`` go to
    ``train.train``. With ``eval_every`` (a multiple of ``log_every``) the history also has
    "eval_kl_bits", the KL to the posterior on ``n_eval`` held-out sequences (seed
    ``CURVE_SEED``, not the evaluation seed) every ``eval_every`` steps: the learning curve.
    """
    task = _task(task)
    seed = _validate.seed("seed", seed, 2**16)
    steps = _validate.integer("steps", steps, 0, MAX_STEPS - 1)
    batch_size = _validate.integer("batch_size", batch_size, 1)
    log_every = _validate.integer("log_every", log_every, 1)
    if eval_every is not None and _validate.integer("eval_every", eval_every, 1) % log_every:
        _validate.fail("eval_every", f"a positive multiple of log_every={log_every}", eval_every)
    device = pick_device(device)
    seed_everything(seed)
    model = models.build(arch, task.vocab_size, task.n_classes, **model_sizes).to(device)
    curve_batch = task.sample(n_eval, seed=CURVE_SEED).to(device) if eval_every else None

    def loss_fn(model, step):
        batch = task.sample(batch_size, seed=DATA_SEED_BASE + seed * MAX_STEPS + step).to(device)
        return task_loss(model, batch)

    def learning_curve(model, step):
        if not eval_every or step % eval_every:
            return None
        with torch.no_grad():  # the weights before this step's update: the model after `step` updates
            return {"eval_kl_bits": diagnostics.kl_bits(model(curve_batch.tokens), curve_batch)}

    history = train(model, loss_fn, steps, optimizer=optimizer, lr=lr, device=device, log_every=log_every,
                    on_step=learning_curve,
                    progress=True if progress is None else progress, checkpoint_path=checkpoint_path,
                    desc=f"{arch} on {task.name}, seed {seed}", schedule=schedule, warmup=warmup,
                    clip_grad_norm=clip_grad_norm, weight_decay=weight_decay)
    return model, history


@torch.no_grad()
def evaluate(model, task, n_seqs=256, seed=EVAL_SEED, **horizon):
    """Score ``model`` on ``n_seqs`` fresh sequences of ``task`` (``horizon``: e.g. K=30 for the HMM).

    Returns floats "entropy_error_bits" (Paper I's |H(model) - H(Bayes)|), "kl_bits"
    (KL(Bayes || model)), "accuracy" (argmax = true hidden answer), "bayes_accuracy" (the same for
    the exact posterior: the best any model can do) and "per_position_error_bits", a (T,) array.
    """
    task = _task(task)
    n_seqs = _validate.integer("n_seqs", n_seqs, 1)
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


def score(model, task, horizons=(), n_seqs=256, seed=EVAL_SEED):
    """``evaluate`` at the trained horizon and at each of ``horizons`` (e.g. [{"K": 30}]), without the
    per-position arrays: {"trained": metrics, "K=30": metrics, ...}."""
    out = {}
    for horizon in [{}] + list(horizons):
        metrics = evaluate(model, task, n_seqs=n_seqs, seed=seed, **horizon)
        metrics.pop("per_position_error_bits")
        out[_horizon_label(horizon)] = metrics
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


def _sizes(arch, task, size, horizons=(), overrides=None):
    """``models.sizes`` for ``task`` at ``size`` with ``overrides``; position-embedded models get a
    max_len that covers the longest sequence they will be evaluated on, unless it is overridden."""
    overrides = dict(overrides or {})
    sizes = models.sizes(arch, size, **overrides)
    if "max_len" in sizes and "max_len" not in overrides:
        longest = max([task.sample(1, seed=0, **h).tokens.shape[1] for h in horizons] + [task.seq_len])
        sizes["max_len"] = max(longest, sizes["max_len"])
    return sizes


def compare(archs, task_names, seeds, steps, size="cpu", lr=3e-3, batch_size=32, n_eval=256,
            horizons=None, device=None, checkpoint_dir=None, progress=False, model_sizes=None,
            keep_models=False, workers=1, threads=None):
    """Train and evaluate every architecture x task x seed; a list of row dicts.

    Each row: arch, task, primitive, seed, horizon ("trained" or e.g. "K=30"), n_params, steps,
    final_loss, train_seconds and the metrics of ``evaluate`` (without the per-position array).
    ``horizons`` maps a task name to extra horizons to evaluate, e.g. {"hmm": [{"K": 30}]}.
    ``model_sizes`` maps an architecture to size overrides on top of ``models.sizes(arch, size)``
    (an override changes only what it names). With ``checkpoint_dir`` each run saves (and
    resumes from) ``<dir>/<arch>-<task>-seed<seed>.pt``. ``keep_models``: return (rows, models),
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
    if size not in ("cpu", "paper"):
        _validate.fail("size", "'cpu' or 'paper'", size)
    workers = _validate.integer("workers", workers, 1)
    if workers > 1 and pick_device(device).type != "cpu":
        _validate.fail("workers", "1 on a GPU (worker processes are for CPU runs)", workers)
    horizons, model_sizes = dict(horizons or {}), dict(model_sizes or {})
    jobs = []
    for name in task_names:
        task = wind_tunnels.wind_tunnel(name, size)
        for arch in archs:
            sizes = _sizes(arch, task, size, horizons.get(name, []), model_sizes.get(arch))
            for seed in seeds:
                jobs.append({"task": name, "size": size, "arch": arch, "seed": _validate.seed("seed", seed, 2**16),
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
        task = wind_tunnels.wind_tunnel(job["task"], size)
        model = models.build(job["arch"], task.vocab_size, task.n_classes, **job["sizes"])
        model.load_state_dict(weights)
        trained[job["arch"], job["task"], job["seed"]] = model.to(pick_device(device))
    return rows, trained


def summarise(rows, metric="entropy_error_bits", by=("arch", "task", "horizon")):
    """Mean, standard deviation (ddof=1; 0 for one seed), min, max and count of ``metric`` over the
    rows sharing ``by``: a dict keyed by the tuple of those fields, in first-seen order."""
    if not isinstance(rows, (list, tuple)) or not rows:
        _validate.fail("rows", "a non-empty list of rows from compare", rows)
    if metric not in rows[0]:
        _validate.fail("metric", f"one of {sorted(k for k, v in rows[0].items() if isinstance(v, float))}", metric)
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
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) and "horizon" in r for r in rows):
        _validate.fail("rows", "a list of rows from compare (dicts with 'arch', 'task', 'horizon')", rows)
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


# ----------------------------------------------------------------------------- converged, shipped models
# Chapters 7 and 8 need models that are *on* the posterior, not near it: that takes thousands of
# steps with a schedule, more than a notebook's CPU budget. scripts/train_wind_tunnels.py runs
# train_converged for every architecture x task x seed and writes the weights and a JSON record
# into PRETRAINED_DIR (shipped inside the package, so Colab has them too); the chapters load them
# and compute every number they print from the weights.

# The recipe, measured on the 2-core CPU: AdamW at 3e-3, a 5% linear warm-up, a cosine decay to 0,
# gradient clipping at 1, batches of 64. A constant rate (chapters 1-6's default) stalls at
# hundredths of a bit: the noise of the late steps keeps the model off the posterior.
RECIPE = dict(optimizer="adamw", lr=3e-3, batch_size=64, schedule="cosine", warmup_fraction=0.05,
              clip_grad_norm=1.0, weight_decay=0.01)
# Steps per task, read off the learning curves of the runs themselves (chapters 7 and 8 show them):
# the HMM, the slowest, gets the most and is flat over its second half; bijection and recall are
# within 0.01 bits of the posterior after about half their steps and creep down as the rate decays.
CONVERGED_STEPS = {"cpu": {"bijection": 3000, "recall": 4000, "hmm": 10000},
                   "paper": {"bijection": 50_000, "recall": 50_000, "hmm": 100_000}}  # Paper I's budget
PAPER_LR = 3e-4  # Paper I's rate for its millions-of-parameters models
# Paper I trains the HMM at K and tests at 1.5K and 2.5K (20 -> 30, 50); the same ratios at any size.
HORIZON_RATIOS = (1.5, 2.5)
N_EVAL_PRETRAINED = 512
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
TRAIN_SCRIPT = "scripts/train_wind_tunnels.py"


def longer_horizons(task):
    """The HMM's test horizons, as ``sample`` keywords: [{"K": 18}, {"K": 30}] for K = 12;
    none for the other tasks."""
    task = _task(task)
    if task.name != "hmm":
        return []
    return [{"K": int(round(r * task.K))} for r in HORIZON_RATIOS]


def model_sizes_for(arch, task, size="cpu"):
    """The constructor sizes of ``arch`` for ``task`` at ``size``: the CPU defaults or the paper's,
    with max_len (for position-embedded models) covering the longest test horizon."""
    task = _task(task, size)
    return _sizes(arch, task, size, longer_horizons(task))


def _run_name(arch, task_name, seed):
    return f"{arch}-{task_name}-seed{seed}"


def _folder(size, directory):
    """Where the shipped runs of ``size`` live, unless ``directory`` says otherwise."""
    return Path(directory) if directory else PRETRAINED_DIR / size


def train_converged(arch, task_name, seed, size="cpu", steps=None, device=None, checkpoint_path=None,
                    progress=None, eval_every=None):
    """Train one (arch, task, seed) with ``RECIPE`` for ``CONVERGED_STEPS`` (or ``steps``) and score it.

    Returns (model, record): the record is a plain dict for JSON with the configuration, the
    recipe, the steps, the seconds, the learning curve (held-out KL every ``eval_every`` steps,
    default steps/40, and the training loss) and the final metrics of ``evaluate`` on
    ``N_EVAL_PRETRAINED`` held-out sequences, at the trained horizon and the longer ones.
    """
    if arch not in models.ARCHITECTURES:
        _validate.fail("arch", f"one of {models.ARCHITECTURES}", arch)
    task = _task(task_name, size)
    steps = CONVERGED_STEPS[size][task.name] if steps is None else steps
    log_every = max(1, steps // 200)
    eval_every = eval_every or log_every * max(1, steps // (40 * log_every))
    sizes = model_sizes_for(arch, task, size)
    recipe = dict(RECIPE, lr=PAPER_LR if size == "paper" else RECIPE["lr"])
    start = time.perf_counter()
    model, history = train_on_task(
        arch, task, steps, seed=seed, lr=recipe["lr"], batch_size=recipe["batch_size"], device=device,
        checkpoint_path=checkpoint_path, progress=progress, log_every=log_every,
        optimizer=recipe["optimizer"], schedule=recipe["schedule"],
        warmup=int(recipe["warmup_fraction"] * steps), clip_grad_norm=recipe["clip_grad_norm"],
        weight_decay=recipe["weight_decay"], eval_every=eval_every, **sizes)
    seconds = time.perf_counter() - start
    model.eval()
    eval_kl = history["eval_kl_bits"] if len(history) else np.array([])
    curve_steps = [int(s) for s, v in zip(history.steps, eval_kl) if not math.isnan(v)]
    final = score(model, task, longer_horizons(task), n_seqs=N_EVAL_PRETRAINED)
    record = {
        "arch": arch, "task": task.name, "primitive": task.primitive, "seed": int(seed), "size": size,
        "task_settings": repr(task), "model_sizes": sizes, "n_params": models.count_parameters(model),
        "recipe": recipe, "steps": int(steps), "seconds": round(seconds, 1),
        "threads": torch.get_num_threads(), "device": str(next(model.parameters()).device),
        "torch": torch.__version__,
        "curve": {"steps": curve_steps, "eval_kl_bits": [float(v) for v in eval_kl if not math.isnan(v)],
                  "loss_steps": [int(s) for s in history.steps] if len(history) else [],
                  "loss": [round(float(v), 5) for v in history["loss"]] if len(history) else []},
        "final": final, "eval_seed": EVAL_SEED, "n_eval": N_EVAL_PRETRAINED,
    }
    return model, record


def save_pretrained(model, record, directory=None):
    """Write ``<arch>-<task>-seed<seed>.pt`` (the weights, on the CPU) and ``.json`` (the record)
    into ``directory`` (default ``PRETRAINED_DIR / size``); returns the two paths."""
    directory = _folder(record["size"], directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / _run_name(record["arch"], record["task"], record["seed"])
    weights, meta = stem.with_suffix(".pt"), stem.with_suffix(".json")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, weights)
    meta.write_text(json.dumps(record, indent=1) + "\n")
    return weights, meta


def load_record(arch, task_name, seed, size="cpu", directory=None):
    """The JSON record that ``train_converged`` wrote for (arch, task, seed), as a dict."""
    path = _folder(size, directory) / (_run_name(arch, task_name, seed) + ".json")
    if not path.exists():
        raise FileNotFoundError(
            f"no pretrained {arch} for {task_name!r}, seed {seed}, size {size!r}: {path} is missing. "
            f"Train it with `python {TRAIN_SCRIPT} --size {size} --archs {arch} --tasks {task_name} "
            f"--seeds {seed}` from the repository root, or set RETRAIN = True in the chapter")
    return json.loads(path.read_text())


def training_summary(size="cpu", directory=None):
    """What ``scripts/train_wind_tunnels.py`` wrote about its last run: runs, workers, total_seconds."""
    path = _folder(size, directory) / "summary.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python {TRAIN_SCRIPT} --size {size}`")
    return json.loads(path.read_text())


def load_pretrained(arch, task_name, seed, size="cpu", directory=None):
    """The model ``scripts/train_wind_tunnels.py`` trained for (arch, task, seed), on the CPU, in
    eval mode; a clear error naming the script when its files are missing."""
    record = load_record(arch, task_name, seed, size, directory)
    task = _task(task_name, size)
    model = models.build(arch, task.vocab_size, task.n_classes, **record["model_sizes"])
    path = _folder(size, directory) / (_run_name(arch, task_name, seed) + ".pt")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing beside its record; rerun `python {TRAIN_SCRIPT}`")
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model.eval()


# ----------------------------------------------------------------------------- verdicts
# A task counts as learned when the model's KL to the posterior is at most LEARNED_FRACTION of the
# KL of the baseline that lacks the task's primitive (task.baseline_posterior), on every seed: the
# baseline's KL is what the primitive is worth in bits, so the model has recovered at least 90% of
# it. Partly: at least half of it (KL at most PARTLY_FRACTION of the baseline's); otherwise not
# learned. Round numbers, and none of the converged models sits near either of them (chapter 8).
LEARNED_FRACTION = 0.1
PARTLY_FRACTION = 0.5


def verdict(kl_per_seed, baseline_kl):
    """'learned', 'partly' or 'not learned' from the KL of every seed and the baseline's KL."""
    if isinstance(kl_per_seed, str) or not hasattr(kl_per_seed, "__len__") or len(kl_per_seed) == 0:
        _validate.fail("kl_per_seed", "the KL of at least one seed (a list, array or 1-D tensor)", kl_per_seed)
    kls = [_validate.real("kl_per_seed", kl, 0) for kl in kl_per_seed]
    worst = max(kls) / _validate.positive("baseline_kl", baseline_kl)
    return "learned" if worst <= LEARNED_FRACTION else "partly" if worst <= PARTLY_FRACTION else "not learned"


def baseline_kl(task, batch):
    """KL (bits) to the posterior of the task's baseline without the primitive, on ``batch``."""
    log_p = torch.log(task.baseline_posterior(batch).double().clamp_min(1e-300))
    return diagnostics.kl_bits(log_p, batch).item()
