"""A training monitor for attention: the paper's diagnostics, recorded while a model trains.

``Monitor(model, every=10)`` attaches forward and backward hooks to every attention layer it finds
in ``model``; the training code does not change. At the chosen steps it records, per layer and head,
the attention weights alpha, the error signal u_i = dL/dg_i (g_i = sum_j alpha_ij v_j, the head's
output before any output projection), the compatibility b_ij = u_i . v_j and the advantage
A_ij = E_{alpha_i}[b] - b_ij of chapter 2. It understands three kinds of layer:

- ``torch.nn.MultiheadAttention``: per-head q, k, v are recomputed from the captured inputs and the
  in-projection weights (and masks), alpha from them; u comes from the gradient of the layer's output
  through the output projection, dL/dg = dL/d(out) @ W_out.
- modules with the probe points ``models.PROBES`` (``probe_q``, ``probe_k``, ``probe_v``,
  ``probe_alpha``, ``probe_g``; ``bayesattn_lite.models.CausalSelfAttention``), found by
  ``models.has_probes``: forward hooks read the tensors, a hook on the gradient of g gives u.
- ``bayesattn_lite.attention.AttentionHead`` (chapters 1-6): the forward pass is recomputed from the
  captured input; u = dL/dlogits @ W_O.

A "step" is a forward pass of ``model`` in training mode with gradients enabled (the forward of a
training step); evaluation passes (``torch.no_grad()`` or ``model.eval()``) are not counted. A record
completes when the backward pass of that step reaches the layer.

Summaries of one record (``Monitor.summary()``, one curve per layer, mean over heads and batch):

- ``positive_mass``      sum_j alpha_ij [A_ij > 0]: the share of attention on keys whose score gradient
                         descent is raising (mean over the queries that see at least two keys and
                         receive an error signal, ||u_i|| > 0: a query without one, e.g. an unscored
                         position of a wind tunnel, has A_i = 0 and would count as mass on nothing)
- ``weighted_entropy``   the attention entropy (nats) of the queries, weighted by how much gradient
                         their scores receive, w_i = sum_j alpha_ij |A_ij| = ||dL/ds_i||_1: are the
                         queries that are still being trained sharp or diffuse?
- ``entropy``            the plain mean attention entropy (nats)
- ``score_grad``         mean over queries of ||dL/ds_i||_1: how much gradient reaches the routing
- ``advantage_share``    sum alpha_ij |A_ij| / sum alpha_ij |b_ij|: the part of the compatibility that
                         differs between the keys a query attends to, i.e. that can move its attention
                         (0 when attention is one-hot or all attended keys are alike); free of u's scale
- ``u_norm``             mean ||u_i||: how much error is left for the head to serve
- ``frame_rate``         the course's frame rate (``diagnostics.frame_change``): the mean total-variation
                         distance between the attention rows of this record and of the previous one, in
                         [0, 1] (nan at the first record); computed online, at each record
- ``precision_rate``     the course's precision rate (``diagnostics.change_vs_final``): how far the values
                         moved since the previous record, relative to their size at the *latest* record
                         (nan at the first). The denominator is the final size, which a monitor running
                         online does not know yet, so ``summary()`` computes this curve afresh from the
                         stored value snapshots each time it is called: during training it is relative to
                         the size now, and once training has ended it is exactly chapter 6's precision
                         rate. (Relative to the size at the *previous* record instead, as earlier
                         versions did, it inflates the moves of values that start small.)

Both rates compare the same inputs only when the batch is fixed (full-batch training) or a ``probe``
batch is given, which the monitor then runs (no gradient) at every recorded step; they use the first
``keep`` sequences of it.

Cost: nothing between recorded steps (the hooks return at once); at a recorded step one extra
(T x T) computation per head. ``measure_overhead`` times a training loop with and without it.
"""

import inspect
import math
import time

import numpy as np
import torch
from torch import nn

from . import _validate, attention, diagnostics, models
from ._types import Float, Tensor, Whole, checked

SUMMARIES = ("positive_mass", "weighted_entropy", "entropy", "score_grad", "advantage_share", "u_norm",
             "frame_rate", "precision_rate")


# ----------------------------------------------------------------------------- finding layers

def _kind(module):
    if isinstance(module, nn.MultiheadAttention):
        return "mha"
    if models.has_probes(module):
        return "probes"
    if isinstance(module, attention.AttentionHead):
        return "head"
    return None


@checked
def attention_layers(model: nn.Module):
    """(name, module, kind) of every attention layer the monitor understands, in model order."""
    found = [(name or "model", m, _kind(m)) for name, m in model.named_modules() if _kind(m)]
    if not found:
        _validate.fail("model", "at least one attention layer (torch.nn.MultiheadAttention, a module with the "
                       f"probe points {models.PROBES}, or attention.AttentionHead)",
                       f"none in {type(model).__name__}", described=True)
    return found


# ----------------------------------------------------------------------------- the three kinds of layer

def _mha_internals(mha, args, kwargs):
    """alpha (B, H, T, S) and v (B, H, S, d) of a MultiheadAttention call, from its inputs and weights."""
    bound = inspect.signature(mha.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    query, key, value = a["query"], a["key"], a["value"]
    if query.dim() == 2:  # unbatched (T, E)
        query, key, value = query[None], key[None], value[None]
    elif not mha.batch_first:  # (T, B, E) -> (B, T, E)
        query, key, value = (t.transpose(0, 1) for t in (query, key, value))
    E, H = mha.embed_dim, mha.num_heads
    if mha.in_proj_weight is not None:  # one packed in-projection (query, key and value of one width)
        W_q, W_k, W_v = mha.in_proj_weight.chunk(3)
    else:
        W_q, W_k, W_v = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    b_q, b_k, b_v = mha.in_proj_bias.chunk(3) if mha.in_proj_bias is not None else (None,) * 3
    with torch.no_grad():
        q, k, v = (nn.functional.linear(t, W, b) for t, W, b in ((query, W_q, b_q), (key, W_k, b_k), (value, W_v, b_v)))
        B, T, S = q.shape[0], q.shape[1], k.shape[1]
        q, k, v = (t.reshape(B, -1, H, E // H).transpose(1, 2) for t in (q, k, v))  # (B, H, L, d)
        s = q @ k.transpose(-1, -2) / math.sqrt(E // H)
        s = s + _additive(a["attn_mask"], a["is_causal"], B, H, T, S, s)
        if a["key_padding_mask"] is not None:
            s = s + _additive(a["key_padding_mask"].reshape(B, 1, 1, S), False, B, H, T, S, s)
        alpha = torch.softmax(s, dim=-1)
    return alpha, v


def _additive(mask, is_causal, B, H, T, S, like):
    """A boolean (True = masked) or float mask as an additive float mask broadcastable to (B, H, T, S)."""
    if mask is None:
        if not is_causal:
            return torch.zeros((), dtype=like.dtype, device=like.device)
        mask = ~torch.ones(T, S, dtype=torch.bool, device=like.device).tril()
    if mask.dim() == 3:  # (B * H, T, S)
        mask = mask.reshape(B, H, T, S)
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(mask, float("-inf"))
    return mask.to(like.dtype)


def _heads(t, H):
    """(B, T, H * d) -> (B, H, T, d)."""
    B, T, _ = t.shape
    return t.reshape(B, T, H, -1).transpose(1, 2)


# ----------------------------------------------------------------------------- summaries

@checked
def summarise(alpha: Float[Tensor, "B H T S"], u: Float[Tensor, "B H T d"],
              v: Float[Tensor, "B H S d"]) -> tuple[Float[Tensor, "B H T S"], Float[Tensor, "B H T S"], dict]:
    """The record of one layer: b, the advantage and the scalar summaries (module docstring).

    alpha (B, H, T, S), u (B, H, T, d), v (B, H, S, d). Masked keys (alpha exactly 0) get advantage 0.
    """
    for name, t in (("alpha", alpha), ("u", u), ("v", v)):
        _validate.finite_values(name, t)
    # attention rows, or all-zero rows (a query that sees no key), up to the dtype's rounding
    tol = max(1e-4, 10 * torch.finfo(alpha.dtype).eps)
    _validate.distributions("alpha", alpha.double(), -1, sum_tol=tol, entry_tol=tol,
                            expected="attention weights in [0, 1] whose rows sum to 1 (a softmax over keys)")
    b = u @ v.transpose(-1, -2)
    _, advantage = attention.score_gradient(alpha, b)
    advantage = advantage.masked_fill(alpha == 0, 0.0)
    push = (alpha * advantage.abs()).sum(-1)  # ||dL/ds_i||_1, (B, H, T)
    entropy = -(alpha * torch.log(alpha.clamp_min(1e-30))).sum(-1)
    seen = ((alpha > 0).sum(-1) >= 2) & (u.norm(dim=-1) > 0)  # queries with a choice and an error signal
    positive = (alpha * (advantage > 0)).sum(-1)
    weight = push.sum()
    spread = (alpha * b.abs()).sum()
    stats = {
        "positive_mass": positive[seen].mean().item() if seen.any() else math.nan,
        "weighted_entropy": ((push * entropy).sum() / weight).item() if weight > 0 else math.nan,
        "entropy": entropy.mean().item(),
        "score_grad": push.mean().item(),
        "advantage_share": (weight / spread).item() if spread > 0 else math.nan,
        "u_norm": u.norm(dim=-1).mean().item(),
    }
    return b, advantage, stats


def precision_rates(snapshots):
    """The precision rate of a list of value snapshots (one per record): nan first, then
    ``diagnostics.change_vs_final`` of the stack, ||v_t - v_{t-1}|| / ||v_last||. A snapshot whose
    shape differs from its predecessor's (a batch of another size, without a probe) gets nan."""
    if isinstance(snapshots, (str, torch.Tensor, np.ndarray)) or not hasattr(snapshots, "__len__") \
            or not all(isinstance(s, (torch.Tensor, np.ndarray)) for s in snapshots):
        _validate.fail("snapshots", "a list of value tensors or arrays (one per record)", snapshots)
    snapshots = [_validate.finite_values(f"snapshots[{i}]", torch.as_tensor(s)) for i, s in enumerate(snapshots)]
    if len(snapshots) < 2:
        return [math.nan] * len(snapshots)
    last = snapshots[-1]
    if all(s.shape == last.shape for s in snapshots):
        return [math.nan] + [float(x) for x in diagnostics.change_vs_final(torch.stack(snapshots))]
    final = last.double().norm().item()
    return [math.nan] + [(b.double() - a.double()).norm().item() / final if a.shape == b.shape and final > 0
                         else math.nan for a, b in zip(snapshots[:-1], snapshots[1:])]


# ----------------------------------------------------------------------------- the monitor

def _try_probe(model, probe):
    """Run the probe once, before any hook is attached, so that inputs the model refuses are named when the
    monitor is made, not at the first recorded step (in eval mode and without gradients: nothing changes)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*probe)
    except Exception as error:  # noqa: BLE001 - any refusal by the model is the probe's problem
        _validate.fail("probe", "inputs the model takes", f"inputs it refused ({type(error).__name__}: "
                       f"{str(error)[:200]})", described=True)
    finally:
        model.train(was_training)


@checked
class Monitor:
    """Record the paper's diagnostics of every attention layer of ``model`` during training.

    every      record at steps 0, every, 2 * every, ... (ignored when ``steps`` is given)
    steps      an explicit collection of steps to record
    keep       how many sequences of each recorded batch to keep as tensors (summaries use all)
    probe      optional inputs (a tensor or a tuple of positional arguments of ``model``) run without
               gradient at every recorded step, so the change rates compare the same sequences

    Use as a context manager, or call ``detach()`` when done::

        with Monitor(model, every=20) as mon:
            train(model, loss_fn, Recipe(steps=500))
        mon.summary()["layer name"]["positive_mass"]
    """

    @checked
    def __init__(self, model, every=10, steps=None, keep: Whole(1) = 4, probe=None):
        if steps is None:  # with steps given, every is not used
            every = _validate.integer("every", every, 1)
        self.model, self.every, self.keep = model, every, keep
        # one step, or strictly increasing steps: "10" or [10, 5] would otherwise record something else
        self.steps = None if steps is None else set(_validate.step_list("steps", steps))
        if probe is not None and not isinstance(probe, (torch.Tensor, tuple)):
            _validate.fail("probe", "a tensor or a tuple of positional arguments of the model", probe)
        self.probe = None if probe is None else (probe if isinstance(probe, tuple) else (probe,))
        if self.probe is not None:
            _try_probe(model, self.probe)
        self.layers = attention_layers(model)
        self.records = []          # one dict per (recorded step, layer), in order of completion
        self.step = -1             # the current training step
        self._active = False       # inside the forward of a step that is recorded
        self._probing = False      # inside the monitor's own probe forward
        self._probe_snap = {}      # layer -> (alpha, v) of the probe at the current step
        self._last = {}            # layer -> (alpha, v) of the previous record, for the rates
        self._pending = {}         # layer -> captured forward state waiting for its u
        self._handles = [model.register_forward_pre_hook(self._on_step)]
        for name, module, kind in self.layers:
            self._handles += getattr(self, f"_attach_{kind}")(name, module)

    # --------------------------------------------------------------- context manager
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    def detach(self):
        """Remove every hook: the model is as it was before the monitor."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # --------------------------------------------------------------- step bookkeeping
    def _wanted(self, step):
        return step in self.steps if self.steps is not None else step % self.every == 0

    def _on_step(self, module, args):
        if self._probing:  # the monitor's own probe pass
            return
        if not (module.training and torch.is_grad_enabled()):
            self._active = False
            return
        self.step += 1
        self._active = self._wanted(self.step)
        self._pending.clear()
        if self._active and self.probe is not None:
            self._probing, self._probe_snap = True, {}
            try:
                with torch.no_grad():
                    module(*self.probe)
            finally:
                self._probing = False

    def _capturing(self):
        return self._active or self._probing

    def _captured(self, name, alpha, v, grad_source, to_u):
        """Store the forward state of one layer; ``to_u(grad)`` turns the gradient of ``grad_source``
        into u (B, H, T, d) when the backward pass arrives."""
        alpha, v = alpha.detach(), v.detach()
        if self._probing:
            self._probe_snap[name] = (alpha[: self.keep].cpu(), v[: self.keep].cpu())
            return
        if not grad_source.requires_grad:
            return
        step = self.step
        self._pending[name] = True

        def on_grad(grad):
            if self._pending.pop(name, None) and self.step == step:
                self._complete(name, step, alpha, v, to_u(grad.detach()))

        grad_source.register_hook(on_grad)

    def _complete(self, name, step, alpha, v, u):
        b, advantage, stats = summarise(alpha.to(u.dtype), u, v.to(u.dtype))
        n = self.keep
        snap = self._probe_snap.get(name, (alpha[:n].cpu(), v[:n].cpu()))
        previous = self._last.get(name)
        stats["frame_rate"] = math.nan
        if previous is not None and previous[0].shape == snap[0].shape:
            stats["frame_rate"] = diagnostics.frame_change(previous[0], snap[0])
        self._last[name] = snap
        self.records.append({"step": step, "layer": name, **stats, "v_snapshot": snap[1],
                             "alpha": alpha[:n].cpu(), "u": u[:n].cpu(), "v": v[:n].cpu(),
                             "b": b[:n].cpu(), "advantage": advantage[:n].cpu()})

    # --------------------------------------------------------------- the three kinds of layer
    def _attach_mha(self, name, mha):
        if mha.bias_k is not None or mha.add_zero_attn:
            _validate.fail(name, "a MultiheadAttention without add_bias_kv and add_zero_attn (not supported by the "
                           "monitor)", f"one with add_bias_kv={mha.bias_k is not None}, add_zero_attn={mha.add_zero_attn}",
                           described=True)
        H = mha.num_heads

        def hook(module, args, kwargs, output):
            if not self._capturing():
                return
            alpha, v = _mha_internals(module, args, kwargs)
            out = output[0]
            batched = out.dim() == 3
            W_out = module.out_proj.weight

            def to_u(grad):  # dL/dg = dL/dout @ W_out, then split into heads
                grad = grad if batched else grad[None]
                grad = grad if (module.batch_first or not batched) else grad.transpose(0, 1)
                return _heads(grad @ W_out.detach(), H)

            self._captured(name, alpha, v, out, to_u)

        return [mha.register_forward_hook(hook, with_kwargs=True)]

    def _attach_probes(self, name, layer):
        seen = {}

        def keep(key):
            def hook(module, args, output):
                if self._capturing():
                    seen[key] = output
            return hook

        def on_g(module, args, output):
            if self._capturing() and "alpha" in seen and "v" in seen:
                self._captured(name, seen["alpha"], seen["v"], output, lambda grad: grad)
            seen.clear()

        handles = [getattr(layer, f"probe_{key}").register_forward_hook(keep(key)) for key in ("alpha", "v")]
        return handles + [layer.probe_g.register_forward_hook(on_g)]

    def _attach_head(self, name, head):
        def hook(module, args, output):
            if not self._capturing():
                return
            x = args[0] if args[0].dim() == 3 else args[0][None]
            with torch.no_grad():
                fw = attention.forward(x, {k: p.detach() for k, p in module.params().items()}, module.causal)
            W_O = module.W_O

            def to_u(grad):  # dL/dg = dL/dlogits @ W_O
                grad = grad if grad.dim() == 3 else grad[None]
                return (grad @ W_O.detach())[:, None]

            self._captured(name, fw["alpha"][:, None], fw["v"][:, None], output, to_u)

        return [head.register_forward_hook(hook)]

    # --------------------------------------------------------------- reading the records
    def summary(self):
        """{layer name: {"step": array, summary name: array}} over the completed records, layers in
        model order (the records themselves complete in backward order, last layer first). The
        precision rate is computed here, from the value snapshots, against the latest one's size."""
        out = {name: None for name, _, _ in self.layers}
        snapshots = {name: [] for name, _, _ in self.layers}
        for r in self.records:
            out[r["layer"]] = out[r["layer"]] or {k: [] for k in ("step",) + SUMMARIES if k != "precision_rate"}
            layer = out[r["layer"]]
            for key in layer:
                layer[key].append(r[key])
            snapshots[r["layer"]].append(r["v_snapshot"])
        for name, d in out.items():
            if d is not None:
                d["precision_rate"] = precision_rates(snapshots[name])
        return {name: {k: np.asarray(d[k], dtype=float if k != "step" else int) for k in ("step",) + SUMMARIES}
                for name, d in out.items() if d is not None}

    def last(self, layer=None):
        """The latest record of ``layer`` (default: the first layer)."""
        names = [n for n, _, _ in self.layers]
        layer = layer or names[0]
        if layer not in names:
            _validate.fail("layer", f"one of {names}", layer)
        for r in reversed(self.records):
            if r["layer"] == layer:
                return r
        _validate.fail("Monitor.last()", f"a record of layer {layer!r}: train with the monitor attached up to a step "
                       "it records", "no record yet", described=True)


# ----------------------------------------------------------------------------- overhead

@checked
def measure_overhead(make_model, step_fn, steps: Whole(1) = 50, every: Whole(1) = 10, repeats: Whole(1) = 3,
                     **monitor_kwargs):
    """Seconds per training step without and with a monitor, measured side by side.

    ``make_model()`` returns a fresh model, ``step_fn(model, optimizer, step)`` runs one training
    step. The two variants alternate ``repeats`` times (so a busy machine slows both alike); the
    medians are returned as {"without": s, "with": s, "ratio": with / without}.
    """
    if isinstance(make_model, torch.nn.Module):   # callable too, but one model cannot be fresh twice
        _validate.fail("make_model", "a function make_model() -> a fresh model, not a model", make_model)
    _validate.function("make_model", make_model, "a function make_model() -> a fresh model", n_args=0)
    _validate.function("step_fn", step_fn, "a function step_fn(model, optimizer, step)", n_args=3)
    passed_on = [p for p in inspect.signature(Monitor).parameters if p not in ("model", "every", "steps")]
    unknown = [k for k in monitor_kwargs if k not in passed_on]
    if unknown:   # named now, not by Monitor() after the warm-up runs
        near = _validate.near_name(unknown[0], ["steps", "every", "repeats", *passed_on])
        raise TypeError(f"monitor.measure_overhead(): got an unexpected keyword argument {unknown[0]!r}"
                        + (f"; did you mean {near!r}?" if near else "") + f" (it passes {', '.join(passed_on)} to Monitor)")

    def timed(monitored):
        model = make_model()
        if not isinstance(model, torch.nn.Module):
            _validate.fail("make_model", "a function returning a fresh torch.nn.Module", f"one returning {model!r}",
                           described=True)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        mon = Monitor(model, every=every, **monitor_kwargs) if monitored else None
        start = time.perf_counter()
        for step in range(steps):
            step_fn(model, opt, step)
        elapsed = (time.perf_counter() - start) / steps
        if mon is not None:
            mon.detach()
        return elapsed

    timed(False)  # warm-up: first calls allocate
    times = {"without": [], "with": []}
    for _ in range(repeats):
        times["without"].append(timed(False))
        times["with"].append(timed(True))
    out = {k: float(np.median(v)) for k, v in times.items()}
    out["ratio"] = out["with"] / out["without"]
    return out
