"""The converged wind-tunnel models that ship with the course (chapters 7-9): the recipe that trains
them, where they live, how they load, and what a chapter concludes from them.

Chapters 7 and 8 need models that are *on* the posterior, not near it: that takes thousands of steps
with a schedule, more than a notebook's CPU budget. ``scripts/train_wind_tunnels.py`` runs
``train_converged`` for every architecture x task x seed and writes the weights and a JSON record
into ``PRETRAINED_DIR`` (shipped inside the package, so Colab has them too); the chapters load them
and compute every number they print from the weights.

- ``train_converged`` one run with the converged recipe (``RECIPE``, each wind tunnel's
                     ``converged_steps``): AdamW, warm-up + cosine, clipping, a held-out learning curve
- ``save_pretrained`` the weights and the record of a run; ``load_pretrained`` the model back (on the
                     CPU, in eval mode), ``load_record`` its record (recipe, seconds, learning curve,
                     metrics), ``training_summary`` what the script wrote about its last run
- ``VARIANTS``       the size ladder and training variants of chapters 7-8 (wider and deeper
                     transformers, wider LSTMs and SSMs, a longer run, stream positions, no weight
                     decay, the paper's recall): ``load_pretrained(..., variant="d48")``, and
                     ``pretrained_variants`` lists what ships
- ``measure_run``    a run's errors (with the sign of the entropy error) and, for a transformer,
                     Paper I's geometry; ``ladder_row(s)`` read them for the shipped runs
- ``verdict``        learned, partly or not learned: a model's KL against ``baseline_kl``, the KL of
                     the baseline that lacks the task's primitive
- ``cost_estimate``  what the paper size costs (parameters, steps, GPU-hours), from stated assumptions
"""

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import torch

from . import _validate, checkpoints, comparison, diagnostics, models, wind_tunnels
from ._types import Distinct, OneOf, Positive, Whole, checked
from .comparison import EVAL_SEED, run_name

# The recipe, measured on the 2-core CPU: AdamW at 3e-3, a 5% linear warm-up, a cosine decay to 0,
# gradient clipping at 1, batches of 64. A constant rate (chapters 1-6's default) stalls at
# hundredths of a bit: the noise of the late steps keeps the model off the posterior. The steps are
# each wind tunnel's ``converged_steps``, read off the learning curves of the runs themselves.
RECIPE = dict(optimizer="adamw", lr=3e-3, batch_size=64, schedule="cosine", warmup_fraction=0.05,
              clip_grad_norm=1.0, weight_decay=0.01)
PAPER_LR = 3e-4  # Paper I's rate for its millions-of-parameters models
N_EVAL_PRETRAINED = 512
PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"
TRAIN_SCRIPT = "scripts/train_wind_tunnels.py"


# ----------------------------------------------------------------------------- variants
# The size ladder and the training variants of chapters 7 and 8 (issue: "too small to show it" or
# "the paper is wrong"?). Each is a change to the converged run, named so that the question it
# answers can be read off: d48 is the transformer at width 48 (d_head 24), d96-l4 at width 96 with
# 4 layers. Their records live in PRETRAINED_DIR/<size>/variants/<name>/, with the weights where
# ``ship_weights`` (the largest rungs ship records only: the package stays small).


@dataclass(frozen=True)
class Variant:
    """One change to the converged recipe: which runs, and what differs from the base run.

    about       one line for tables and figures
    runs        the (arch, task) pairs it is trained on
    seeds       which seeds; or {arch: seeds} where an architecture is too slow for three
    task_seeds  per task: its seeds where they differ from ``seeds`` (more seeds where a run is cheap)
    sizes       per architecture: model size overrides (on top of ``comparison.model_sizes_for``)
    task        constructor overrides of the wind tunnel (e.g. the paper's recall size)
    recipe      overrides of ``RECIPE`` (e.g. weight_decay=0)
    steps       per task: the steps, when not the wind tunnel's ``converged_steps`` x ``steps_factor``
    """

    about: str
    runs: tuple
    seeds: tuple = (0, 1, 2)
    task_seeds: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    task: dict = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)
    steps_factor: float = 1.0
    steps: dict = field(default_factory=dict)
    ship_weights: bool = True


_LADDER = tuple(("transformer", t) for t in wind_tunnels.WIND_TUNNELS)
RECALL_PAPER = dict(n_keys=20, n_values=20, n_pairs=40, noise=0.0)  # Paper I's recall: 20 keys, noiseless
VARIANTS = {
    "d48": Variant("transformer, width 48 (d_head 24)", _LADDER, sizes={"transformer": dict(d_model=48)}),
    "d96": Variant("transformer, width 96 (d_head 48)", _LADDER, seeds=(0,),  # the HMM: 18 CPU-minutes a run
                   task_seeds={"bijection": (0, 1, 2), "recall": (0, 1, 2)},
                   sizes={"transformer": dict(d_model=96)}, ship_weights=False),
    "d96-l4": Variant("transformer, width 96, 4 layers", _LADDER[0::2],
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
                        (("transformer", "recall"), ("mamba", "recall"), ("lstm", "recall"), ("mlp", "recall")),
                        task=RECALL_PAPER,
                        seeds={"transformer": (0, 1, 2), "mamba": (0,), "lstm": (0, 1, 2), "mlp": (0, 1, 2)}),
}


SIZES = ("small", "paper")


def _settings(size="small", variant=None, directory=None, existing=False):
    """Check ``size`` ("small" or "paper"), ``variant`` (None or a name in ``VARIANTS``) and, with
    ``existing``, that ``directory`` (None: the shipped runs) is a folder there is to read from."""
    _validate.choice("size", size, SIZES)
    if variant is not None:
        _variant(variant)
    _validate.folder("directory", directory)
    if existing and directory is not None and not (isinstance(directory, (str, Path)) and Path(directory).is_dir()):
        _validate.fail("directory", "an existing folder of runs (or None: the shipped ones)", directory)


def _run_key(arch, task_name, seed=0, size="small", variant=None, directory=None, existing=False):
    """Check what names a run before any file is looked up (a typo such as arch="gpt" gets a clear
    error, not "file missing, train it with --archs gpt"); returns the seed as an int."""
    _validate.choice("arch", arch, models.ARCHITECTURES)
    _validate.choice("task_name", task_name, tuple(wind_tunnels.WIND_TUNNELS))
    _settings(size, variant, directory, existing)
    if variant is not None:   # no file to train: none is planned
        _variant(variant, arch, task_name)
    return _validate.seed("seed", seed, wind_tunnels.MAX_SEED)


@checked
def variant_seeds(variant_name, arch: OneOf(models.ARCHITECTURES),
                  task_name: OneOf(tuple(wind_tunnels.WIND_TUNNELS)) | None = None):
    """The seeds a variant trains ``arch`` on (on ``task_name``, where the variant gives that task its own)."""
    variant = _variant(variant_name, arch, task_name)
    if task_name is not None and task_name in variant.task_seeds:
        return variant.task_seeds[task_name]
    return variant.seeds[arch] if isinstance(variant.seeds, dict) else variant.seeds


def _variant(name, arch=None, task_name=None):
    """``VARIANTS[name]``, with a clear error for an unknown name, or for an ``arch`` or ``task_name``
    it does not train (its seeds or steps there would describe runs that do not exist)."""
    if name not in VARIANTS:
        _validate.fail("variant", f"one of {sorted(VARIANTS)}", name)

    def trains(variant):
        return any(arch in (None, a) and task_name in (None, t) for a, t in variant.runs)

    if not trains(VARIANTS[name]):
        others = [n for n, v in VARIANTS.items() if trains(v)]
        _validate.fail("variant", f"a variant that trains {arch or 'a model'} on {task_name or 'a task'} "
                       f"({name!r} trains {', '.join(f'{a} on {t}' for a, t in VARIANTS[name].runs)}; "
                       f"{'those that do: ' + ', '.join(others) if others else 'none does'})", name)
    return VARIANTS[name]


@checked
def variant_task(task_name: OneOf(tuple(wind_tunnels.WIND_TUNNELS)), variant_name=None, size="small"):
    """The wind tunnel of a run: ``task_name`` at ``size``, with the variant's task overrides."""
    _settings(size, variant_name)
    task = wind_tunnels.as_wind_tunnel(task_name, size)
    overrides = _variant(variant_name, task_name=task_name).task if variant_name else {}
    if not overrides:
        return task
    settings = {k: getattr(task, k) for k in task.settings}
    return type(task)(**{**settings, **overrides})


def folder(size="small", directory=None, variant_name=None):
    """Where the shipped runs of ``size`` (and ``variant_name``) live, unless ``directory`` says otherwise."""
    _settings(size, variant_name, directory)
    if directory:
        return Path(directory)
    return PRETRAINED_DIR / size / "variants" / variant_name if variant_name else PRETRAINED_DIR / size


@checked
def variant_steps(task_name: OneOf(tuple(wind_tunnels.WIND_TUNNELS)), variant_name=None, size="small"):
    """The steps of a converged run: the wind tunnel's ``converged_steps``, or what the variant says."""
    _settings(size, variant_name)
    base = wind_tunnels.WIND_TUNNELS[task_name].converged_steps[size]
    if not variant_name:
        return base
    v = _variant(variant_name, task_name=task_name)
    return v.steps.get(task_name, int(round(base * v.steps_factor)))


def variant_recipe(variant_name=None, size="small"):
    """``RECIPE`` at ``size`` (the paper's rate there), with the variant's overrides."""
    _settings(size, variant_name)
    recipe = dict(RECIPE, lr=PAPER_LR if size == "paper" else RECIPE["lr"])
    return {**recipe, **(_variant(variant_name).recipe if variant_name else {})}


def _run_sizes(arch, task, size, variant_name):
    """The constructor sizes of a converged run: ``comparison.model_sizes_for``, then the variant's."""
    sizes = comparison.model_sizes_for(arch, task, size)
    if variant_name:
        sizes.update(_variant(variant_name).sizes.get(arch, {}))
    return sizes


# ----------------------------------------------------------------------------- train, save, load

@checked
def train_converged(arch, task_name, seed, size="small", steps: Whole(1) | None = None, device=None,
                    checkpoint_path=None,
                    progress=None, eval_every: Whole(1) | None = None, variant=None):
    """Train one (arch, task, seed) with ``RECIPE`` for the wind tunnel's ``converged_steps`` (or
    ``steps``) and score it.

    Returns (model, record): the record is a plain dict for JSON with the configuration, the
    recipe, the steps, the seconds, the learning curve (held-out KL every ``eval_every`` steps,
    default steps/40, and the training loss) and the final metrics of ``comparison.evaluate`` on
    ``N_EVAL_PRETRAINED`` held-out sequences, at the trained horizon and the test horizons.
    ``variant`` names an entry of ``VARIANTS`` (a ladder rung or training variant): its sizes,
    task, recipe and steps replace the base run's.
    """
    _run_key(arch, task_name, seed, size, variant)
    variant_name = variant
    task = variant_task(task_name, variant_name, size)
    steps = variant_steps(task.name, variant_name, size) if steps is None else steps
    log_every = max(1, steps // 200)
    eval_every = (log_every * max(1, steps // (40 * log_every)) if eval_every is None   # 0 would be "never"
                  else eval_every)
    sizes = _run_sizes(arch, task, size, variant_name)
    recipe = variant_recipe(variant_name, size)
    start = time.perf_counter()
    model, history = comparison.train_on_task(
        arch, task, steps, seed=seed, lr=recipe["lr"], batch_size=recipe["batch_size"], device=device,
        checkpoint_path=checkpoint_path, progress=progress, log_every=log_every,
        optimizer=recipe["optimizer"], schedule=recipe["schedule"],
        warmup=int(recipe["warmup_fraction"] * steps), clip_grad_norm=recipe["clip_grad_norm"],
        weight_decay=recipe["weight_decay"], eval_every=eval_every, **sizes)
    seconds = time.perf_counter() - start
    model.eval()
    eval_kl = history["eval_kl_bits"] if len(history) else np.array([])
    curve_steps = [int(s) for s, v in zip(history.steps, eval_kl) if not math.isnan(v)]
    final = comparison.score(model, task, task.test_horizons(), n_seqs=N_EVAL_PRETRAINED)
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


@checked
def save_pretrained(model: Annotated[torch.nn.Module, "the model train_converged returned"], record, directory=None):
    """Write ``<arch>-<task>-seed<seed>.pt`` (the weights, on the CPU) and ``.json`` (the record)
    into ``directory`` (default ``PRETRAINED_DIR / size``, or its ``variants/<name>`` for a
    variant's run); returns the two paths."""
    _validate.record("record", record, ("arch", "task", "seed", "size"), "train_converged")
    _run_key(record["arch"], record["task"], record["seed"], record["size"], record.get("variant"))
    stem = folder(record["size"], directory, record.get("variant")) / run_name(record["arch"], record["task"],
                                                                                 record["seed"])
    _validate.writable_path("directory", stem.with_suffix(".json"))
    task = variant_task(record["task"], record.get("variant"), record["size"])
    expected = models.build(record["arch"], task.vocab_size, task.n_classes, **record.get("model_sizes", {}))
    shapes = {k: tuple(v.shape) for k, v in expected.state_dict().items()}
    if {k: tuple(v.shape) for k, v in model.state_dict().items()} != shapes:   # its .pt would not load
        sizes = record.get("model_sizes", "the default")
        _validate.fail("model", f"the {record['arch']} the record describes (sizes {sizes})",
                       f"a {type(model).__name__} with other weights", described=True)
    weights, meta = stem.with_suffix(".pt"), stem.with_suffix(".json")
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, weights)
    meta.write_text(json.dumps(record, indent=1) + "\n")
    return weights, meta


def train_command(arch, task_name, seed, variant_name=None, size="small"):
    """The command that trains (arch, task, seed[, variant]) into the package: what an error names."""
    seed = _run_key(arch, task_name, seed, size, variant_name)
    extra = f" --variants {variant_name}" if variant_name else ""
    return f"python {TRAIN_SCRIPT} --size {size} --archs {arch} --tasks {task_name} --seeds {seed}{extra}"


def load_record(arch, task_name, seed, variant=None, size="small", directory=None):
    """The JSON record that ``train_converged`` wrote for (arch, task, seed[, variant]), as a dict."""
    seed = _run_key(arch, task_name, seed, size, variant, directory, existing=True)
    path = folder(size, directory, variant) / (run_name(arch, task_name, seed) + ".json")
    if not path.exists():
        raise FileNotFoundError(
            f"no pretrained {arch} for {task_name!r}, seed {seed}, size {size!r}"
            f"{f', variant {variant!r}' if variant else ''}: {path} is missing. Train it with "
            f"`{train_command(arch, task_name, seed, variant, size)}` from the repository root, "
            "or set RETRAIN = True in the chapter")
    return checkpoints.read_json(path, f"the record of a trained {arch} for {task_name!r}",
                                 keys=("arch", "task", "seed", "model_sizes", "n_params", "steps", "seconds", "final"),
                                 advice=f"rebuild it with `{train_command(arch, task_name, seed, variant, size)} --force`")


def pretrained_variants(size="small", directory=None):
    """What ships for the variants: {variant name: [(arch, task, seed, has_weights), ...]}, in the
    order of ``VARIANTS`` (a variant with nothing shipped is left out)."""
    _settings(size, None, directory, existing=True)
    root = Path(directory) if directory else PRETRAINED_DIR / size / "variants"
    out = {}
    for name in VARIANTS:
        runs = []
        for path in sorted((root / name).glob("*.json")):
            r = checkpoints.read_json(path, f"the record of a run of variant {name!r}", keys=("arch", "task", "seed"))
            runs.append((r["arch"], r["task"], r["seed"], path.with_suffix(".pt").exists()))
        if runs:
            out[name] = runs
    return out


def training_summary(size="small", directory=None):
    """What ``scripts/train_wind_tunnels.py`` wrote about its last run: runs, workers, total_seconds."""
    _settings(size, None, directory, existing=True)
    path = folder(size, directory) / "summary.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python {TRAIN_SCRIPT} --size {size}`")
    return checkpoints.read_json(path, "the summary of a training run", advice=f"run `python {TRAIN_SCRIPT} --size {size}`")


def load_pretrained(arch, task_name, seed, variant=None, size="small", directory=None):
    """The model ``scripts/train_wind_tunnels.py`` trained for (arch, task, seed), on the CPU, in
    eval mode; ``variant`` names a ladder rung or training variant (``VARIANTS``, e.g. "d48").
    A clear error naming the script when its files are missing (the largest rungs ship their
    records only: ``pretrained_variants`` says which have weights)."""
    seed = _run_key(arch, task_name, seed, size, variant, directory, existing=True)
    record = load_record(arch, task_name, seed, variant, size, directory)
    task = variant_task(task_name, variant, size)
    name = folder(size, directory, variant) / run_name(arch, task_name, seed)
    try:
        model = models.build(arch, task.vocab_size, task.n_classes, **record["model_sizes"])
    except (TypeError, ValueError) as exc:   # the record's sizes, not the caller's arguments
        checkpoints.damaged(f"{name}.json", f"the record of a trained {arch}", f"its model_sizes do not build one ({exc})",
                            f"rebuild it with `{train_command(arch, task_name, seed, variant, size)} --force`")
    path = name.with_suffix(".pt")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing beside its record (weights not shipped at this size); "
                                f"rebuild it with `{train_command(arch, task_name, seed, variant, size)} --force`")
    checkpoints.load_weights(model, path, f"the weights of a {arch} for {task_name!r} (sizes {record['model_sizes']})",
                             advice=f"rebuild it with `{train_command(arch, task_name, seed, variant, size)} --force`")
    return model.eval()


# ----------------------------------------------------------------------------- verdicts
# A task counts as learned when the model's KL to the posterior is at most LEARNED_FRACTION of the
# KL of the baseline that lacks the task's primitive (task.baseline_posterior), on every seed: the
# baseline's KL is what the primitive is worth in bits, so the model has recovered at least 90% of
# it. Partly: at least half of it (KL at most PARTLY_FRACTION of the baseline's); otherwise not
# learned. Round numbers, and none of the converged models sits near either of them (chapter 8).
LEARNED_FRACTION = 0.1
PARTLY_FRACTION = 0.5


@checked
def verdict(kl_per_seed, baseline_kl: Positive):
    """'learned', 'partly' or 'not learned' from the KL of every seed and the baseline's KL."""
    if isinstance(kl_per_seed, str) or not hasattr(kl_per_seed, "__len__") or len(kl_per_seed) == 0:
        _validate.fail("kl_per_seed", "the KL of at least one seed (a list, array or 1-D tensor)", kl_per_seed)
    kls = [_validate.real("kl_per_seed", kl, 0) for kl in kl_per_seed]
    worst = max(kls) / baseline_kl
    return "learned" if worst <= LEARNED_FRACTION else "partly" if worst <= PARTLY_FRACTION else "not learned"


@checked
def baseline_kl(task: wind_tunnels.WindTunnel, batch: wind_tunnels.WindTunnelBatch):
    """KL (bits) to the posterior of the task's baseline without the primitive, on ``batch``."""
    if (batch.posterior.shape[-1] != task.n_classes or int(batch.tokens.max()) >= task.vocab_size
            or batch.tokens.shape[-1] <= getattr(task, "prefix_len", 0)):
        _validate.fail("batch", f"a batch of this task, {task!r}.sample(...)", f"a batch of {batch.posterior.shape[-1]} "
                       f"classes and tokens of shape {tuple(batch.tokens.shape)}", described=True)
    log_p = torch.log(task.baseline_posterior(batch).double().clamp_min(1e-300))
    # kl_bits takes logits; log-probabilities are logits too (log_softmax leaves them unchanged)
    return diagnostics.kl_bits(log_p, batch).item()


# ----------------------------------------------------------------------------- what a run measures
# The size ladder's figures (chapters 7 and 8): the errors in both metrics, with the sign of the
# entropy error, and for a transformer Paper I's geometry beside the floor its head width allows.
# Computed from the weights where they ship; stored in the record ("measured") by the training
# script for every run, so the rungs that ship no weights can be read too.

@checked
def measure_run(model: Annotated[torch.nn.Module, "e.g. from load_pretrained"], task,
                n_seqs: Whole(1) = N_EVAL_PRETRAINED, seed=EVAL_SEED):
    """A run's measurements on ``n_seqs`` held-out sequences, as plain floats for JSON.

    "kl_bits", "entropy_error_bits" and "entropy_bias_bits" (the signed H(model) - H(Bayes):
    > 0 under-confident); for a transformer also "geometry": the layer-0 key cosines (all tokens and
    per token group, as is and centred) with "d_head", the attention entropy per layer and the
    first principal component's share (and Spearman with the posterior entropy) of the last layer's
    head outputs, of each head and of the residual stream (``diagnostics.bayesian_geometry``)."""
    task = wind_tunnels.as_wind_tunnel(task)
    device = next(model.parameters()).device
    batch = task.sample(n_seqs, seed=seed).to(device)
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


def has_weights(arch, task_name, seed, variant=None, size="small", directory=None):
    """Whether the weights of a run ship (the largest rungs ship their records only)."""
    seed = _run_key(arch, task_name, seed, size, variant)
    return (folder(size, directory, variant) / (run_name(arch, task_name, seed) + ".pt")).exists()


def ladder_row(arch, task_name, seed, variant=None, size="small", directory=None):
    """One run of the ladder as a flat dict: arch, task, seed, variant, n_params, steps, minutes,
    the record's final metrics and ``measure_run``'s, recomputed from the weights where they ship
    ("source": "weights") and read from the record otherwise ("source": "record")."""
    seed = _run_key(arch, task_name, seed, size, variant, directory, existing=True)
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


@checked
def ladder_rows(arch: OneOf(models.ARCHITECTURES), tasks: Distinct("tasks", "a task", "task's runs") = tuple(
        wind_tunnels.WIND_TUNNELS), variants=(None,),
                size="small"):
    """``ladder_row`` for every shipped run of ``arch`` on ``tasks`` at each of ``variants`` (None:
    the base runs, seeds 0-2), in that order. A variant that does not cover a task is left out; a
    run it covers whose record is missing raises (``load_record``'s error names the command)."""
    _settings(size)
    if isinstance(tasks, str) or not all(isinstance(t, str) and t in wind_tunnels.WIND_TUNNELS for t in tasks):
        _validate.fail("tasks", f"a tuple of names from {sorted(wind_tunnels.WIND_TUNNELS)}", tasks)
    if isinstance(variants, str) or not all(v is None or (isinstance(v, str) and v in VARIANTS) for v in variants):
        _validate.fail("variants", f"a tuple of None (the base runs) and names from {sorted(VARIANTS)}", variants)
    rows = []
    for name in variants:
        for task_name in tasks:
            if name is None:
                seeds = (0, 1, 2)
            elif (arch, task_name) in _variant(name).runs:
                seeds = variant_seeds(name, arch, task_name)
            else:
                continue
            rows += [ladder_row(arch, task_name, seed, name, size) for seed in seeds]
    return rows


# ----------------------------------------------------------------------------- the paper size, planned
# No GPU has run the paper size of this course yet, so its cost is an estimate from two stated
# assumptions, printed by the training script before it starts: training costs about
# 6 x parameters x tokens floating-point operations (forward and backward; Kaplan et al. 2020), done
# at ASSUMED_GPU_FLOPS; and no step is faster than the architecture's ``gpu_step_seconds``
# (``models.REGISTRY``), the launch cost of an unfused model of this size (hundreds of small kernels
# a step; Mamba's scan in plain PyTorch more). scripts/gpu_check.py measures the real time per step
# on a GPU; replace these with what it prints.
ASSUMED_GPU_FLOPS = 10e12                   # float32, sustained: a fraction of a data-centre GPU's peak


@checked
def cost_estimate(arch, task_name, size="paper", seeds: Whole(1) = 1, variant=None):
    """What training (arch, task) at ``size`` costs, estimated: a dict with n_params, steps,
    tokens (steps x batch x sequence length), tflop (6 x parameters x tokens / 1e12) and
    gpu_hours for ``seeds`` runs, from ASSUMED_GPU_FLOPS and the architecture's step floor
    (an estimate, not a measurement)."""
    _run_key(arch, task_name, size=size, variant=variant)
    task = variant_task(task_name, variant, size)
    sizes = _run_sizes(arch, task, size, variant)
    with torch.device("meta"):  # count the parameters without allocating them
        n_params = models.count_parameters(models.build(arch, task.vocab_size, task.n_classes, **sizes))
    steps = variant_steps(task.name, variant, size)
    tokens = steps * RECIPE["batch_size"] * task.seq_len
    flop = 6 * n_params * tokens
    seconds = max(flop / ASSUMED_GPU_FLOPS, steps * models.REGISTRY[arch].gpu_step_seconds)
    return {"arch": arch, "task": task.name, "n_params": n_params, "steps": steps, "tokens": tokens,
            "tflop": flop / 1e12, "gpu_hours": seeds * seconds / 3600, "seeds": seeds}
