"""Frame and precision inside a trained transformer (chapter 9): the dynamics of the wind-tunnel
Transformer of chapters 7-8 while it trains with the shipped recipe.

The paper's two-timescale claim says that attention (the *frame*) settles early while the values
(the *precision*) keep refining, and that much of the loss decrease comes after the attention maps
have settled. Chapters 4-6 measured it in one-head toys; ``run`` measures it, per attention layer,
in the 2-layer Transformer that ``converged.train_converged`` trains: the same model, data stream,
seed and recipe (AdamW, warm-up + cosine, clipping, the wind tunnel's ``converged_steps``), so that
the run *is* the shipped model's run, observed.

That recipe is not the paper's optimiser. Adam divides each parameter's step by its own gradient
scale, which removes the asymmetry between small and large factors that the SGD argument of chapter 5
rests on, and a cosine decay to zero anneals the batch noise away, which alone lowers the late KL.
``run(optimizer=...)`` therefore also trains two controls (``OPTIMIZERS``) with the same model,
task, seed, data stream, step count and snapshot grid: AdamW at a constant rate (the decay removed,
nothing else changed) and plain SGD at a constant rate (no momentum, warm-up, clipping or weight
decay: the paper's optimiser, at the rate ``SGD_LR`` this model needs to learn in the same steps).

- ``run``            one (task, seed): every ``SNAPSHOT_EVERY`` steps, on a fixed probe batch, the
                     attention maps and value vectors of every layer, the probe loss and the KL to the
                     exact posterior; between two snapshots, the attribution of the probe loss's
                     change to parameter groups. Returns a small dict (the
                     JSON record ``scripts/wind_tunnel_dynamics.py`` ships), no weights
- ``parameter_groups``  routing (query and key rows of ``qkv``) and values (its value rows) of each
                     layer, and the rest (embeddings, LayerNorms, MLPs, out-projections, readout)
- ``summarise``      the course's one settle measure (``diagnostics.settle``) of each layer's frame
                     and precision rates, the share of the loss decrease after the frame settled and
                     who bought it, the KL there and at the end
- ``bought_after``   who bought the decrease after a fixed step (no settle step: for rates that never settle)
- ``load_record``    a shipped record (``DYNAMICS_DIR``), per (task, seed, optimizer)

The measures, with the names of the course:

- frame rate: ``diagnostics.frame_change`` (mean total-variation distance between attention rows) of
  a layer's maps (all heads, all query rows) on the probe batch between consecutive snapshots
- precision rate: ``diagnostics.change_vs_final`` of the layer's value vectors v_j on the probe batch:
  how far they moved between snapshots, relative to their final size
- attribution: the loss decrease bought by a group g, sum_t -grad_g L . delta theta_g(t), where L is
  the loss on the probe batch (not on the training batch, whose gradient is correlated with its own
  step) and t runs over the intervals between snapshots. The first-order formula holds for any
  optimizer; here the gradient is averaged along the straight line from one snapshot to the next
  (``ATTRIBUTION_NODES``-point Gauss-Legendre, i.e. integrated gradients), which makes the sum over
  groups equal to the realised change of L in each interval (L is smooth along a line), however far
  and however noisily the weights travelled. The plain rule (the gradient at one end, or the mean of
  both ends, every 10 steps) was measured first: late in training, when the loss falls by
  thousandths of a nat per 50 steps and the noisy Adam steps are not, it attributed up to 6 times the
  realised decrease. ``realised_decrease`` beside it is the check.
"""

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from . import _validate, checkpoints, comparison, converged, diagnostics, models, wind_tunnels
from ._types import OneOf, SeedBelow, Whole, checked, unchecked
from .train import Recipe, seed_everything, train

TASKS = ("bijection", "recall")
SEEDS = (0, 1, 2)
ARCH = "transformer"
SNAPSHOT_EVERY = 50     # steps between snapshots of alpha, v, loss and KL
ATTRIBUTION_NODES = 6   # Gauss-Legendre nodes on the straight line between two snapshots
_x, _w = np.polynomial.legendre.leggauss(ATTRIBUTION_NODES)
NODES, WEIGHTS = [float(x) for x in (_x + 1) / 2], [float(w) for w in _w / 2]  # on [0, 1], weights sum to 1
N_PROBE = 128           # sequences of the fixed probe batch
PROBE_SEED = comparison.CURVE_SEED  # held-out sequences (the learning curves' seed), not a training batch
DYNAMICS_DIR = converged.PRETRAINED_DIR / "dynamics"
SCRIPT = "scripts/wind_tunnel_dynamics.py"
DIGITS = 6              # significant digits kept in the records
# Plain SGD's constant rate, chosen by a short measurement on seed 0 (no snapshots; the probe batch's
# KL in bits, against AdamW + cosine's at the same step): the grid's rate that learns both tasks
# fastest without diverging. Bijection after 500 steps: lr 0.1 -> 0.74, 0.3 -> 0.26, 1 -> 0.11,
# 3 -> 0.21 (AdamW 0.044). Recall after 1000 steps: 0.3 -> 0.79 (still on the plateau of the
# uniform answer), 1 -> 0.070 (AdamW 0.049), 3 diverges at the first steps.
SGD_LR = 1.0
# The optimisers ``run`` can train with, as changes to ``converged.RECIPE`` (the shipped models' recipe).
OPTIMIZERS = {
    "adamw-cosine": {},                                 # the shipped recipe: AdamW, 5% warm-up, cosine decay to 0
    "adamw-constant": {"schedule": "constant"},         # the same without the decay: batch noise is not annealed
    "sgd-constant": {"optimizer": "sgd", "lr": SGD_LR, "schedule": "constant",  # the paper's optimiser
                     "warmup_fraction": 0.0, "clip_grad_norm": None, "weight_decay": 0.0},
}
SHIPPED = "adamw-cosine"


# What names a run, declared by run, record_path and load_record: checked before any file is looked
# up or any training starts.
Task, RunSeed, Optimizer = OneOf(TASKS), SeedBelow(2**16), OneOf(OPTIMIZERS)


@checked
def recipe(optimizer: OneOf(OPTIMIZERS) = SHIPPED):
    """The recipe (a dict like ``converged.RECIPE``) that ``optimizer``, a key of ``OPTIMIZERS``, names."""
    return {**converged.RECIPE, **OPTIMIZERS[optimizer]}


def _check_record(record, keys):
    """A record of ``run`` (a dict): at least ``keys``, the ones the caller reads."""
    return _validate.record("record", record, keys, "dynamics.run or load_record")


class _Stop(Exception):
    """Raised from inside the training loop to end a run early (``run(stop=...)``)."""


def parameter_groups(model):
    """{group name: [(parameter name, row slice or None)]}: "layer l routing" (the query and key rows
    of layer l's ``qkv`` projection, weight and bias), "layer l values" (its value rows), and "rest"
    (every other parameter: embeddings, LayerNorms, MLPs, the out-projections ``proj``, the readout).
    Every scalar of the model is in exactly one group."""
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "attention_layers"):
        _validate.fail("model", "a transformer (models.build('transformer', ...): a model with attention_layers())",
                       type(model).__name__, described=True)
    layers = model.attention_layers()
    groups = {}
    claimed = {}
    for l, layer in enumerate(layers):
        d = layer.qkv.out_features // 3
        for pname, p in model.named_parameters():
            if p is layer.qkv.weight or p is layer.qkv.bias:
                groups.setdefault(f"layer {l} routing", []).append((pname, slice(0, 2 * d)))
                groups.setdefault(f"layer {l} values", []).append((pname, slice(2 * d, 3 * d)))
                claimed[pname] = True
    groups["rest"] = [(pname, None) for pname, _ in model.named_parameters() if pname not in claimed]
    return groups


def _group_dots(groups, a, b):
    """{group: sum of a . b over the group's entries}, a and b dicts parameter name -> tensor."""
    out = {}
    for g, entries in groups.items():
        total = 0.0
        for pname, rows in entries:
            x, y = (a[pname], b[pname]) if rows is None else (a[pname][rows], b[pname][rows])
            total += float((x.double() * y.double()).sum())
        out[g] = total
    return out


def _round(x):
    if x is None or not math.isfinite(x):
        return x
    return float(f"{x:.{DIGITS}g}")


def _rounded(values):
    return [_round(float(v)) for v in values]


RECIPE_KEYS = ("optimizer", "lr", "schedule", "warmup_fraction", "clip_grad_norm", "weight_decay")   # recipe()'s


def _recipe_object(how, steps):
    """The ``train.Recipe`` of a recipe dict (``recipe(...)``, with RECIPE_KEYS) for a run of ``steps`` steps."""
    return Recipe(steps, optimizer=how["optimizer"], lr=how["lr"], schedule=how["schedule"],
                  warmup=int(how["warmup_fraction"] * steps), clip_grad_norm=how["clip_grad_norm"],
                  weight_decay=how["weight_decay"])


def rate_factor(record, step):
    """The factor on the base learning rate at ``step`` of the run ``record`` describes (its schedule
    and warm-up): 1 throughout a constant-rate run after its warm-up, toward 0 under the cosine."""
    record = _check_record(record, ("recipe", "steps_total"))
    recipe = _validate.record("record['recipe']", record["recipe"], RECIPE_KEYS, "dynamics.recipe")
    total = _validate.integer("record['steps_total']", record["steps_total"], 1)
    return _recipe_object(recipe, total).rate_factor(_validate.integer("step", step, 0, total))


@checked
def run(task_name: Task, seed: RunSeed, stop=None, progress=False, threads: Whole(1) = 1,
        optimizer: Optimizer = SHIPPED):
    """Train the wind-tunnel Transformer on ``task_name`` ("bijection", "recall") for ``seed`` with the
    recipe ``optimizer`` names (a key of ``OPTIMIZERS``; default the shipped one) and measure its
    dynamics; returns the record (a plain dict for JSON).

    ``stop``: end after that many steps (a multiple of ``SNAPSHOT_EVERY``) with the schedule of the
    full run, for tests: the curves are then a prefix of the full run's (the precision rate aside,
    which is relative to the last snapshot's size; ``value_norm`` gives it back in absolute terms).
    ``threads``: torch's CPU threads during the run (1: the shipped runs' setting; restored after).

    The record: configuration (task, seed, steps, "optimizer" (the key of ``OPTIMIZERS``), recipe,
    sizes, n_params, probe), "seconds", "steps" (the snapshot steps), per layer "frame_rate" and
    "precision_rate" (one per interval between snapshots, ending at steps[1:]) and "value_norm"
    (||v|| at each snapshot), "loss" (the probe batch's cross-entropy, nats) and "kl_bits" (to the
    exact posterior) at each snapshot, "attribution" {group: the decrease it bought per interval}, "realised_decrease" (loss at the first
    snapshot - at the last) and "final" (``comparison.evaluate`` at the end, to compare with the
    shipped model's record).
    """
    task = wind_tunnels.wind_tunnel(task_name, "small")
    steps = task.converged_steps["small"]
    if stop is not None:
        stop = _validate.integer("stop", stop, SNAPSHOT_EVERY, steps)
        if stop % SNAPSHOT_EVERY:
            _validate.fail("stop", f"a multiple of SNAPSHOT_EVERY={SNAPSHOT_EVERY}", stop)
    end = steps if stop is None else stop
    how = recipe(optimizer)
    sizes = comparison.model_sizes_for(ARCH, task)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # exactly comparison.train_on_task's run: seed, then the model, then the same data stream
        seed_everything(seed)
        model = models.build(ARCH, task.vocab_size, task.n_classes, **sizes)
        probe = task.sample(N_PROBE, seed=PROBE_SEED)
        groups = parameter_groups(model)
        names = [n for n, _ in model.named_parameters()]
        n_layers = len(model.attention_layers())
        state = {"theta": None}
        snaps = {"steps": [], "alpha": [[] for _ in range(n_layers)], "v": [[] for _ in range(n_layers)],
                 "loss": [], "kl_bits": []}
        frame = [[] for _ in range(n_layers)]
        attribution = {g: [] for g in groups}

        @unchecked()   # a step's model and batch are made here: their types are not checked again each step
        def loss_fn(m, step):
            batch = task.sample(how["batch_size"], seed=wind_tunnels.data_seed(seed, step))
            return comparison.task_loss(m, batch)

        def probe_loss(m):
            logits = m(probe.tokens)
            return logits, torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), probe.targets.flatten(), ignore_index=wind_tunnels.IGNORE_INDEX)

        def chord_attribution(m, theta_a, theta_b):
            """-int_0^1 grad_g L(theta_a + s delta) . delta_g ds per group, by Gauss-Legendre; the
            weights are put back exactly afterwards."""
            params = dict(m.named_parameters())
            delta = {n: theta_b[n] - theta_a[n] for n in names}
            out = {g: 0.0 for g in groups}
            try:
                for s_k, w_k in zip(NODES, WEIGHTS):
                    with torch.no_grad():
                        for n in names:
                            params[n].copy_(theta_a[n] + s_k * delta[n])
                    _, loss = probe_loss(m)
                    grads = dict(zip(names, torch.autograd.grad(loss, [params[n] for n in names])))
                    for g, dot in _group_dots(groups, grads, delta).items():
                        out[g] -= w_k * dot
            finally:
                with torch.no_grad():
                    for n in names:
                        params[n].copy_(theta_b[n])
            return out

        def measure(m, step):
            if step % SNAPSHOT_EVERY == 0:
                params = dict(m.named_parameters())
                theta = {n: params[n].detach().clone() for n in names}
                if state["theta"] is not None:
                    for g, a in chord_attribution(m, state["theta"], theta).items():
                        attribution[g].append(a)
                state["theta"] = theta
                with torch.no_grad():
                    logits, loss = probe_loss(m)
                records = models.run_with_probes(m, probe.tokens, ("probe_v", "probe_alpha"))
                for l, r in enumerate(records):
                    if snaps["alpha"][l]:
                        frame[l].append(diagnostics.frame_change(snaps["alpha"][l][-1], r["alpha"]))
                    snaps["alpha"][l] = [r["alpha"]]  # only the last map is needed
                    snaps["v"][l].append(r["v"].clone())
                snaps["steps"].append(int(step))
                snaps["loss"].append(loss.item())
                snaps["kl_bits"].append(diagnostics.kl_bits(logits, probe).item())
            if stop is not None and step == stop:
                raise _Stop

        start = time.perf_counter()
        try:
            train(model, loss_fn, _recipe_object(how, steps), log_every=steps, on_step=measure, progress=progress,
                  desc=f"{ARCH} on {task.name}, seed {seed}, {optimizer}", device="cpu")
            measure(model, steps)  # the model after the last update
        except _Stop:
            pass
        seconds = time.perf_counter() - start
        final = comparison.evaluate(model, task, n_seqs=converged.N_EVAL_PRETRAINED)
    finally:
        torch.set_num_threads(old_threads)
    layers = []
    for l in range(n_layers):
        v = torch.stack(snaps["v"][l])
        layers.append({"frame_rate": _rounded(frame[l]),
                       "precision_rate": _rounded(diagnostics.change_vs_final(v)),
                       "value_norm": _rounded(v.flatten(1).double().norm(dim=1))})
    return {
        "arch": ARCH, "task": task.name, "seed": int(seed), "steps_total": int(steps), "stopped_at": int(end),
        "optimizer": optimizer, "recipe": how, "model_sizes": sizes, "n_params": models.count_parameters(model),
        "task_settings": repr(task), "probe": {"n": N_PROBE, "seed": PROBE_SEED},
        "snapshot_every": SNAPSHOT_EVERY, "attribution_nodes": ATTRIBUTION_NODES,
        "seconds": round(seconds, 1), "threads": int(threads), "torch": torch.__version__,
        "steps": snaps["steps"], "layers": layers, "loss": _rounded(snaps["loss"]),
        "kl_bits": _rounded(snaps["kl_bits"]),
        "attribution": {g: _rounded(a) for g, a in attribution.items()},
        "realised_decrease": _round(snaps["loss"][0] - snaps["loss"][-1]),
        "final": {"kl_bits": _round(final["kl_bits"]), "entropy_error_bits": _round(final["entropy_error_bits"])},
    }


# ----------------------------------------------------------------------------- records

@checked
def record_path(task_name: Task, seed: RunSeed, directory=None, optimizer: Optimizer = SHIPPED):
    """Where the record of (task, seed, optimizer) lives: ``DYNAMICS_DIR`` unless ``directory`` says
    otherwise. The shipped recipe's records keep their first name, ``transformer-<task>-seed<seed>.json``;
    the controls add the optimizer, ``transformer-<task>-seed<seed>-sgd-constant.json``."""
    suffix = "" if optimizer == SHIPPED else f"-{optimizer}"
    return (DYNAMICS_DIR if directory is None else _validate.folder("directory", directory)) / f"{ARCH}-{task_name}-seed{seed}{suffix}.json"


def save_record(record, directory=None):
    """Write ``record`` into ``directory`` (default ``DYNAMICS_DIR``) under ``record_path``'s name;
    returns the path."""
    record = _check_record(record, ("task", "seed"))
    _validate.choice("record['task']", record["task"], TASKS)   # named as the record's, not as record_path's task_name
    _validate.seed("record['seed']", record["seed"], 2**16)
    _validate.choice("record['optimizer']", record.get("optimizer", SHIPPED), list(OPTIMIZERS))
    path = record_path(record["task"], record["seed"], directory, record.get("optimizer", SHIPPED))
    path = Path(_validate.writable_path("directory", path))
    path.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    return path


@checked
def load_record(task_name: Task, seed: RunSeed, directory=None, optimizer: Optimizer = SHIPPED):
    """The shipped record of (task, seed, optimizer), as a dict; a clear error naming the script when
    missing."""
    if directory is not None and not (isinstance(directory, (str, Path)) and Path(directory).is_dir()):
        _validate.fail("directory", "an existing folder of records (or None: the shipped ones)", directory)
    path = record_path(task_name, seed, directory, optimizer)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python {SCRIPT} --tasks {task_name} --seeds {seed} "
                                f"--optimizer {optimizer}` from the repository root, or set RETRAIN = True in chapter 9")
    record = checkpoints.read_json(path, f"the dynamics record of {task_name!r}, seed {seed}", keys=("layers",),
                                   advice=f"run `python {SCRIPT} --tasks {task_name} --seeds {seed} --optimizer {optimizer}`")
    record.setdefault("optimizer", SHIPPED)  # records written before run() took an optimizer are the shipped recipe's
    return record


# ----------------------------------------------------------------------------- the summary

def _settle_at(result, fraction):
    return result["settled"][fraction]


@checked
def summarise(record, fractions: diagnostics.Fractions = diagnostics.SETTLE_FRACTIONS, window=diagnostics.SETTLE_WINDOW):
    """Per layer of one record: the settle measure of its frame and precision rates
    (``diagnostics.settle``: peak, the step the rate falls for good below each fraction of its
    peak, or None), t_frame and t_values (the settle steps at the first fraction), the share of the
    probe loss decrease after t_frame, the first-order decrease after t_frame by group (its share
    of their sum) and the KL at t_frame and at the end. A list, one dict per layer."""
    _check_record(record, ("steps", "loss", "kl_bits", "attribution", "layers"))
    if not fractions:
        _validate.fail("fractions", "one or more fractions of the peak, e.g. (0.2, 0.1)", fractions)
    for i, layer in enumerate(record["layers"]):
        if not isinstance(layer, dict) or not {"frame_rate", "precision_rate"} <= set(layer):
            _validate.fail(f"record['layers'][{i}]", "a layer's rates (a dict with frame_rate, precision_rate)", layer)
    steps = np.asarray(record["steps"])
    rate_steps = steps[1:]
    loss = np.asarray(record["loss"], dtype=float)
    kl = np.asarray(record["kl_bits"], dtype=float)
    attribution = {g: np.asarray(a, dtype=float) for g, a in record["attribution"].items()}
    total_first_order = sum(a.sum() for a in attribution.values())
    out = []
    for l, layer in enumerate(record["layers"]):
        frame = diagnostics.settle(rate_steps, layer["frame_rate"], fractions, window)
        values = diagnostics.settle(rate_steps, layer["precision_rate"], fractions, window)
        t_frame, t_values = _settle_at(frame, fractions[0]), _settle_at(values, fractions[0])
        row = {"layer": l, "frame": frame, "values": values, "t_frame": t_frame, "t_values": t_values,
               "loss_share_after_t_frame": None, "attribution_after_t_frame": None,
               "kl_bits_at_t_frame": None, "kl_bits_end": float(kl[-1]),
               "first_order_over_realised": float(total_first_order / (loss[0] - loss[-1])),
               "last_step": int(steps[-1])}
        if t_frame is not None:
            k = int(np.nonzero(steps == t_frame)[0][0])
            row["loss_share_after_t_frame"] = float((loss[k] - loss[-1]) / (loss[0] - loss[-1]))
            after = {g: float(a[k:].sum()) for g, a in attribution.items()}  # intervals ending after t_frame
            total = sum(after.values())
            row["attribution_after_t_frame"] = {g: x / total for g, x in after.items()} if total else None
            row["kl_bits_at_t_frame"] = float(kl[k])
        out.append(row)
    return out


def bought_after(record, step):
    """Who bought the probe loss's decrease from snapshot ``step`` to the end, without any settle step
    (a fixed window, the same for every optimiser): {group: the decrease it bought, nats}, "values"
    (both layers' value rows) and "routing" (both layers' query and key rows) beside the groups, and
    "realised" (the loss at ``step`` minus the loss at the end). In nats, not as shares: late in a
    constant-rate run the realised decrease is near zero, and shares of it would be noise."""
    _check_record(record, ("steps", "loss", "attribution"))
    steps = list(record["steps"])
    if step not in steps[:-1]:
        _validate.fail("step", f"a snapshot step before the last of {steps[:2]}...{steps[-2:]}" if len(steps) > 1
                       else f"a record of at least 2 snapshots (this one has {len(steps)})", step)
    window = diagnostics.bought_in_window(record["attribution"], record["loss"], steps.index(step))
    out = {g: float(x) for g, x in window.items() if g != "realised"}
    for kind in ("values", "routing"):
        out[kind] = sum(x for g, x in out.items() if g.endswith(f" {kind}"))
    out["realised"] = float(window["realised"])
    return out


def order(frame, values, fraction):
    """"frame first", "values first", "together", or what cannot be said: ``diagnostics.settle_order``
    (which checks that both are settle results holding ``fraction``)."""
    return diagnostics.settle_order(frame, values, fraction)
