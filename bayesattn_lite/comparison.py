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
- ``VARIANTS``       the size ladder and training variants of chapters 7-8 (wider and deeper
                     transformers, wider LSTMs and SSMs, a longer run, stream positions, no weight
                     decay, the paper's recall): ``load_pretrained(..., variant="d48")``, and
                     ``pretrained_variants`` lists what ships
- ``measure_run``    a run's errors (with the sign of the entropy error) and, for a transformer,
                     Paper I's geometry; ``ladder_row(s)`` read them for the shipped runs
- ``cost_estimate``  what the paper size costs (parameters, steps, GPU-hours), from stated assumptions

The table has no pandas dependency: rows are plain dicts, ``summarise`` groups them.
"""

import concurrent.futures
import json
import math
import multiprocessing
import os
import time
from dataclasses import dataclass, field
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

    Returns floats "entropy_error_bits" (Paper I's |H(model) - H(Bayes)|), "entropy_bias_bits"
    (the signed H(model) - H(Bayes): > 0 when the model is less confident than Bayes), "kl_bits"
    (KL(Bayes || model)), "accuracy" (argmax = true hidden answer), "bayes_accuracy" (the same for
    the exact posterior: the best any model can do) and "per_position_error_bits" and
    "per_position_kl_bits", (T,) arrays.
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
            "entropy_bias_bits": diagnostics.entropy_bias_bits(logits, batch).item(),
            "kl_bits": diagnostics.kl_bits(logits, batch).item(),
            "accuracy": right.item(), "bayes_accuracy": bayes_right.item(),
            "per_position_error_bits": diagnostics.per_position_error_bits(logits, batch).cpu().numpy(),
            "per_position_kl_bits": diagnostics.per_position_kl_bits(logits, batch).cpu().numpy()}


def _horizon_label(horizon):
    return ", ".join(f"{k}={v}" for k, v in sorted(horizon.items())) or "trained"


def score(model, task, horizons=(), n_seqs=256, seed=EVAL_SEED):
    """``evaluate`` at the trained horizon and at each of ``horizons`` (e.g. [{"K": 30}]), without the
    per-position arrays: {"trained": metrics, "K=30": metrics, ...}."""
    out = {}
    for horizon in [{}] + list(horizons):
        metrics = evaluate(model, task, n_seqs=n_seqs, seed=seed, **horizon)
        metrics.pop("per_position_error_bits")
        metrics.pop("per_position_kl_bits")
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


# ----------------------------------------------------------------------------- variants
# The size ladder and the training variants of chapters 7 and 8 (issue: "too small to show it" or
# "the paper is wrong"?). Each is a change to the converged run above, named so that the
# question it answers can be read off: d48 is the transformer at width 48 (d_head 24), d96-l4 at
# width 96 with 4 layers. Their records live in PRETRAINED_DIR/<size>/variants/<name>/, with the
# weights where ``ship_weights`` (the largest rungs ship records only: the package stays small).


@dataclass(frozen=True)
class Variant:
    """One change to the converged recipe: which runs, and what differs from the base run.

    about       one line for tables and figures
    runs        the (arch, task) pairs it is trained on
    seeds       which seeds; or {arch: seeds} where an architecture is too slow for three
    sizes       per architecture: model size overrides (on top of ``model_sizes_for``)
    task        constructor overrides of the wind tunnel (e.g. the paper's recall size)
    recipe      overrides of ``RECIPE`` (e.g. weight_decay=0)
    steps       per task: the steps, when not ``CONVERGED_STEPS`` x ``steps_factor``
    """

    about: str
    runs: tuple
    seeds: tuple = (0, 1, 2)
    sizes: dict = field(default_factory=dict)
    task: dict = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)
    steps_factor: float = 1.0
    steps: dict = field(default_factory=dict)
    ship_weights: bool = True


TASKS = ("bijection", "hmm", "recall")
_LADDER = tuple(("transformer", t) for t in TASKS)
RECALL_PAPER = dict(n_keys=20, n_values=20, n_pairs=40, noise=0.0)  # Paper I's recall: 20 keys, noiseless
VARIANTS = {
    "d48": Variant("transformer, width 48 (d_head 24)", _LADDER, sizes={"transformer": dict(d_model=48)}),
    "d96": Variant("transformer, width 96 (d_head 48)", _LADDER, seeds=(0,),
                   sizes={"transformer": dict(d_model=96)}, ship_weights=False),
    "d96-l4": Variant("transformer, width 96, 4 layers", _LADDER[0::2], seeds=(0,),
                      sizes={"transformer": dict(d_model=96, n_layers=4)}, ship_weights=False),
    "d64": Variant("selective SSM, width 64", (("mamba", "hmm"),), seeds=(0,), sizes={"mamba": dict(d_model=64)}),
    "d88": Variant("LSTM, width 88", (("lstm", "hmm"),), seeds=(0,), sizes={"lstm": dict(d_model=88)}),
    "d176": Variant("LSTM, width 176", (("lstm", "hmm"),), seeds=(0,), sizes={"lstm": dict(d_model=176)},
                    ship_weights=False),
    "long": Variant("30,000 steps (3x)", (("transformer", "hmm"),), seeds=(0,), steps={"hmm": 30_000}),
    "stream": Variant("transformer, stream positions (learned prefix, ALiBi recency on the observations)",
                      (("transformer", "hmm"),),
                      sizes={"transformer": dict(stream_start=wind_tunnels.HMMTask().prefix_len)}),
    "no-wd-2x": Variant("no weight decay, twice the steps", (("transformer", "bijection"),),
                        recipe=dict(weight_decay=0.0), steps_factor=2.0),
    "recall20": Variant("Paper I's recall: 20 keys, 20 values, 40 pairs, noiseless",
                        tuple((a, "recall") for a in models.ARCHITECTURES), task=RECALL_PAPER,
                        seeds={"transformer": (0, 1, 2), "mamba": (0,), "lstm": (0, 1, 2), "mlp": (0, 1, 2)}),
}


def variant_seeds(variant_name, arch):
    """The seeds a variant trains ``arch`` on."""
    seeds = _variant(variant_name).seeds
    return seeds[arch] if isinstance(seeds, dict) else seeds


def _variant(name):
    """``VARIANTS[name]``, with a clear error for an unknown name."""
    if name not in VARIANTS:
        _validate.fail("variant", f"one of {sorted(VARIANTS)}", name)
    return VARIANTS[name]


def variant_task(task_name, variant_name=None, size="cpu"):
    """The wind tunnel of a run: ``task_name`` at ``size``, with the variant's task overrides."""
    task = _task(task_name, size)
    overrides = _variant(variant_name).task if variant_name else {}
    if not overrides:
        return task
    settings = {k: getattr(task, k) for k in task.settings}
    return type(task)(**{**settings, **overrides})


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


def _folder(size, directory, variant_name=None):
    """Where the shipped runs of ``size`` (and ``variant_name``) live, unless ``directory`` says otherwise."""
    if directory:
        return Path(directory)
    return PRETRAINED_DIR / size / "variants" / variant_name if variant_name else PRETRAINED_DIR / size


def variant_steps(task_name, variant_name=None, size="cpu"):
    """The steps of a converged run: ``CONVERGED_STEPS``, or what the variant says."""
    base = CONVERGED_STEPS[size][task_name]
    if not variant_name:
        return base
    v = _variant(variant_name)
    return v.steps.get(task_name, int(round(base * v.steps_factor)))


def variant_recipe(variant_name=None, size="cpu"):
    """``RECIPE`` at ``size`` (the paper's rate there), with the variant's overrides."""
    recipe = dict(RECIPE, lr=PAPER_LR if size == "paper" else RECIPE["lr"])
    return {**recipe, **(_variant(variant_name).recipe if variant_name else {})}


def train_converged(arch, task_name, seed, size="cpu", steps=None, device=None, checkpoint_path=None,
                    progress=None, eval_every=None, variant=None):
    """Train one (arch, task, seed) with ``RECIPE`` for ``CONVERGED_STEPS`` (or ``steps``) and score it.

    Returns (model, record): the record is a plain dict for JSON with the configuration, the
    recipe, the steps, the seconds, the learning curve (held-out KL every ``eval_every`` steps,
    default steps/40, and the training loss) and the final metrics of ``evaluate`` on
    ``N_EVAL_PRETRAINED`` held-out sequences, at the trained horizon and the longer ones.
    ``variant`` names an entry of ``VARIANTS`` (a ladder rung or training variant): its sizes,
    task, recipe and steps replace the base run's.
    """
    if arch not in models.ARCHITECTURES:
        _validate.fail("arch", f"one of {models.ARCHITECTURES}", arch)
    variant_name = variant
    task = variant_task(task_name, variant_name, size)
    steps = variant_steps(task.name, variant_name, size) if steps is None else steps
    log_every = max(1, steps // 200)
    eval_every = eval_every or log_every * max(1, steps // (40 * log_every))
    sizes = model_sizes_for(arch, task, size)
    if variant_name:
        sizes.update(_variant(variant_name).sizes.get(arch, {}))
    recipe = variant_recipe(variant_name, size)
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
        "final": final, "eval_seed": EVAL_SEED, "n_eval": N_EVAL_PRETRAINED, "variant": variant_name,
    }
    return model, record


def save_pretrained(model, record, directory=None):
    """Write ``<arch>-<task>-seed<seed>.pt`` (the weights, on the CPU) and ``.json`` (the record)
    into ``directory`` (default ``PRETRAINED_DIR / size``, or its ``variants/<name>`` for a
    variant's run); returns the two paths."""
    directory = _folder(record["size"], directory, record.get("variant"))
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / _run_name(record["arch"], record["task"], record["seed"])
    weights, meta = stem.with_suffix(".pt"), stem.with_suffix(".json")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, weights)
    meta.write_text(json.dumps(record, indent=1) + "\n")
    return weights, meta


def _train_command(arch, task_name, seed, variant_name, size):
    extra = f" --variants {variant_name}" if variant_name else ""
    return (f"python {TRAIN_SCRIPT} --size {size} --archs {arch} --tasks {task_name} --seeds {seed}{extra}")


def load_record(arch, task_name, seed, variant=None, size="cpu", directory=None):
    """The JSON record that ``train_converged`` wrote for (arch, task, seed[, variant]), as a dict."""
    if variant is not None:
        _variant(variant)
    path = _folder(size, directory, variant) / (_run_name(arch, task_name, seed) + ".json")
    if not path.exists():
        raise FileNotFoundError(
            f"no pretrained {arch} for {task_name!r}, seed {seed}, size {size!r}"
            f"{f', variant {variant!r}' if variant else ''}: {path} is missing. Train it with "
            f"`{_train_command(arch, task_name, seed, variant, size)}` from the repository root, "
            "or set RETRAIN = True in the chapter")
    return json.loads(path.read_text())


def pretrained_variants(size="cpu", directory=None):
    """What ships for the variants: {variant name: [(arch, task, seed, has_weights), ...]}, in the
    order of ``VARIANTS`` (a variant with nothing shipped is left out)."""
    root = Path(directory) if directory else PRETRAINED_DIR / size / "variants"
    out = {}
    for name in VARIANTS:
        runs = []
        for path in sorted((root / name).glob("*.json")):
            r = json.loads(path.read_text())
            runs.append((r["arch"], r["task"], r["seed"], path.with_suffix(".pt").exists()))
        if runs:
            out[name] = runs
    return out


def training_summary(size="cpu", directory=None):
    """What ``scripts/train_wind_tunnels.py`` wrote about its last run: runs, workers, total_seconds."""
    path = _folder(size, directory) / "summary.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python {TRAIN_SCRIPT} --size {size}`")
    return json.loads(path.read_text())


def load_pretrained(arch, task_name, seed, variant=None, size="cpu", directory=None):
    """The model ``scripts/train_wind_tunnels.py`` trained for (arch, task, seed), on the CPU, in
    eval mode; ``variant`` names a ladder rung or training variant (``VARIANTS``, e.g. "d48").
    A clear error naming the script when its files are missing (the largest rungs ship their
    records only: ``pretrained_variants`` says which have weights)."""
    record = load_record(arch, task_name, seed, variant, size, directory)
    task = variant_task(task_name, variant, size)
    model = models.build(arch, task.vocab_size, task.n_classes, **record["model_sizes"])
    path = _folder(size, directory, variant) / (_run_name(arch, task_name, seed) + ".pt")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing beside its record (weights not shipped at this size); "
                                f"rebuild it with `{_train_command(arch, task_name, seed, variant, size)} --force`")
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


# ----------------------------------------------------------------------------- what a run measures
# The size ladder's figures (chapters 7 and 8): the errors in both metrics, with the sign of the
# entropy error, and for a transformer Paper I's geometry beside the floor its head width allows.
# Computed from the weights where they ship; stored in the record ("measured") by the training
# script for every run, so the rungs that ship no weights can be read too.

def measure_run(model, task, n_seqs=N_EVAL_PRETRAINED, seed=EVAL_SEED):
    """A run's measurements on ``n_seqs`` held-out sequences, as plain floats for JSON.

    "kl_bits", "entropy_error_bits" and "entropy_bias_bits" (the signed H(model) - H(Bayes):
    > 0 under-confident); for a transformer also "geometry": the layer-0 key cosines (all tokens and
    per token group, as is and centred) with "d_head", the attention entropy per layer and the
    first principal component's share (and Spearman with the posterior entropy) of the last layer's
    head outputs, of each head and of the residual stream (``diagnostics.bayesian_geometry``)."""
    task = _task(task)
    device = next(model.parameters()).device
    batch = task.sample(_validate.integer("n_seqs", n_seqs, 1), seed=seed).to(device)
    with torch.no_grad():
        logits = model.eval()(batch.tokens)
    out = {"kl_bits": diagnostics.kl_bits(logits, batch).item(),
           "entropy_error_bits": diagnostics.entropy_error_bits(logits, batch).item(),
           "entropy_bias_bits": diagnostics.entropy_bias_bits(logits, batch).item()}
    if hasattr(model, "attention_layers"):
        geo = diagnostics.bayesian_geometry(model, batch, task.token_groups())
        geo = {k: v for k, v in geo.items() if k not in ("pc1", "entropy")}
        geo["d_head"] = model.attention_layers()[0].d_head
        out["geometry"] = geo
    return out


def has_weights(arch, task_name, seed, variant=None, size="cpu", directory=None):
    """Whether the weights of a run ship (the largest rungs ship their records only)."""
    return (_folder(size, directory, variant) / (_run_name(arch, task_name, seed) + ".pt")).exists()


def ladder_row(arch, task_name, seed, variant=None, size="cpu", directory=None):
    """One run of the ladder as a flat dict: arch, task, seed, variant, n_params, steps, minutes,
    the record's final metrics and ``measure_run``'s, recomputed from the weights where they ship
    ("source": "weights") and read from the record otherwise ("source": "record")."""
    record = load_record(arch, task_name, seed, variant, size, directory)
    if has_weights(arch, task_name, seed, variant, size, directory):
        model = load_pretrained(arch, task_name, seed, variant, size, directory)
        measured, source = measure_run(model, variant_task(task_name, variant, size)), "weights"
    elif "measured" in record:
        measured, source = record["measured"], "record"
    else:
        raise FileNotFoundError(f"{arch} on {task_name}, seed {seed}, variant {variant!r}: no weights and no "
                                f"measurements in the record; run `python {TRAIN_SCRIPT} --measure`")
    return {"arch": arch, "task": task_name, "seed": seed, "variant": variant or "base",
            "n_params": record["n_params"], "steps": record["steps"], "minutes": record["seconds"] / 60,
            "model_sizes": record["model_sizes"], "final": record["final"], "source": source, **measured}


# ----------------------------------------------------------------------------- the paper size, planned
# No GPU has run the paper size of this course yet, so its cost is an estimate from two stated
# assumptions, printed by the training script before it starts: training costs about
# 6 x parameters x tokens floating-point operations (forward and backward; Kaplan et al. 2020), done
# at ASSUMED_GPU_FLOPS; and no step is faster than ASSUMED_STEP_SECONDS, the launch cost of an
# unfused model of this size (hundreds of small kernels a step; Mamba's scan in plain PyTorch more).
# scripts/gpu_check.py measures the real time per step on a GPU; replace these with what it prints.
ASSUMED_GPU_FLOPS = 10e12                   # float32, sustained: a fraction of a data-centre GPU's peak
ASSUMED_STEP_SECONDS = {"transformer": 0.01, "mamba": 0.03, "lstm": 0.01, "mlp": 0.005}


def cost_estimate(arch, task_name, size="paper", seeds=1, variant=None):
    """What training (arch, task) at ``size`` costs, estimated: a dict with n_params, steps,
    tokens (steps x batch x sequence length), tflop (6 x parameters x tokens / 1e12) and
    gpu_hours for ``seeds`` runs, from the ASSUMED_* constants above (an estimate, not a measurement)."""
    if arch not in models.ARCHITECTURES:
        _validate.fail("arch", f"one of {models.ARCHITECTURES}", arch)
    seeds = _validate.integer("seeds", seeds, 1)
    task = variant_task(task_name, variant, size)
    sizes = model_sizes_for(arch, task, size)
    if variant:
        sizes.update(_variant(variant).sizes.get(arch, {}))
    with torch.device("meta"):  # count the parameters without allocating them
        n_params = models.count_parameters(models.build(arch, task.vocab_size, task.n_classes, **sizes))
    steps = variant_steps(task.name, variant, size)
    tokens = steps * RECIPE["batch_size"] * task.seq_len
    flop = 6 * n_params * tokens
    seconds = max(flop / ASSUMED_GPU_FLOPS, steps * ASSUMED_STEP_SECONDS[arch])
    return {"arch": arch, "task": task.name, "n_params": n_params, "steps": steps, "tokens": tokens,
            "tflop": flop / 1e12, "gpu_hours": seeds * seconds / 3600, "seeds": seeds}


def ladder_rows(arch, tasks=TASKS, variants=(None,), size="cpu"):
    """``ladder_row`` for every shipped run of ``arch`` on ``tasks`` at each of ``variants`` (None:
    the base runs, seeds 0-2), in that order. A variant that does not cover a task is left out; a
    run it covers whose record is missing raises (``load_record``'s error names the command)."""
    rows = []
    for name in variants:
        for task_name in tasks:
            if name is None:
                seeds = (0, 1, 2)
            elif (arch, task_name) in _variant(name).runs:
                seeds = variant_seeds(name, arch)
            else:
                continue
            rows += [ladder_row(arch, task_name, seed, name, size) for seed in seeds]
    return rows
