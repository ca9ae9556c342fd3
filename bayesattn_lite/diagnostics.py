"""Measurements of a head during training: how sharp its attention is, how specialised its values
are, how fast each changes, and the geometry of its value vectors.

Everything takes tensors (or arrays) and returns tensors or plain floats, so the chapters, the
widgets and the training monitors of chapter 9 all compute the same numbers the same way.

- ``attention_entropy``        H(alpha_i) in nats for every query (0 for a one-hot row)
- ``attention_mass``           the attention a query puts on a set of keys (e.g. the signal positions)
- ``attention_received``       the attention each key gets from the queries that see it (1 = uniform)
- ``advantage_flow``           sum_{j in set} alpha_ij A_ij: how hard gradient descent pushes up the
                               scores of a set of keys together (the advantage law, summed)
- ``predicted_attention_change``  the next step's change of alpha that the advantage law predicts
- ``compatibility_and_advantage``  b_ij, A_ij and dL/ds_ij of a head on a batch (closed form)
- ``attended_compatibility``   E_{alpha_i}[cos(u_i, v_j)]: negative when the values a query uses point
                               against its error signal, i.e. when values have specialised
- ``value_pull``, ``movement_toward``  -dL/dv_j = -sum_i alpha_ij u_i, and how far each value moved
                               against each query's error signal (the value law, measured)
- ``relative_change``          ||after - before|| / ||before||: the speed of a quantity between snapshots
- ``frame_change``             the *frame rate* between two snapshots of attention: mean total-variation
                               distance between attention rows, in [0, 1]
- ``change_vs_final``          the *precision rate*: how far values moved between snapshots, / final size
- ``settling_step``            the step after which a rate stays below a fixed threshold
- ``settle``                   the course's one settle measure: a rate against its own peak (peak step,
                               steps to fall for good below 20% and 10% of it, or "not settled by N");
                               ``settle_order`` says which of two pathways settled first
- ``progress_step``            the step by which a curve has covered a fraction of its total change
- ``pca``                      principal components of a point cloud, with explained-variance shares
- ``pearson``, ``spearman``    correlations of two flat samples
- ``mean_sd``                  mean and sample standard deviation (ddof=1) of a sample: "mean ± sd over seeds"
"""

import math

import numpy as np
import torch

from . import _validate, attention, models
from ._types import Array, Distinct, Finite, Flag, Float, Positive, Real, Seed, Shaped, Tensor, Whole, checked
from .wind_tunnels import WindTunnelBatch

# What the measures take: a torch tensor or a numpy array (Array), shapes declared in each signature
Maps = Float[Array, "*B T T"]   # attention maps alpha (..., queries, keys), rows over the keys


def _check_alpha(alpha):
    """Attention maps: weights in [0, 1], rows summing to 1 (the signature checked the shape)."""
    alpha = torch.as_tensor(alpha)
    if (alpha < 0).any() or (alpha > 1).any():  # not empty here, so min and max exist
        _validate.fail("alpha", "attention weights in [0, 1]",
                       f"values from {alpha.min().item():.4g} to {alpha.max().item():.4g}", described=True)
    sums = alpha.sum(-1)
    if not torch.allclose(sums, torch.ones((), dtype=alpha.dtype), atol=1e-4):
        worst = sums.flatten()[(sums - 1).abs().nan_to_num(float("inf")).argmax()].item()
        _validate.fail("alpha", "every row to sum to 1 (a softmax over keys)", f"a row summing to {worst:.4g}",
                       described=True)
    return alpha


LOG2 = math.log(2.0)


# ----------------------------------------------------------------------------- information
# The one entropy and the one KL divergence of the package: every other measure calls these.

def _dim(dim, t):
    """An axis of ``t``: an int in [-t.dim(), t.dim() - 1]."""
    return _validate.integer("dim", dim, -max(t.dim(), 1), max(t.dim(), 1) - 1)


@checked
def entropy(probs: Float[Array, "..."], dim=-1, bits: Flag = False) -> Tensor:
    """Shannon entropy -sum_k p_k log p_k along ``dim`` (0 log 0 = 0), in nats, or bits if ``bits``.

    Computed in float64; NaN or inf probabilities are an error, not a NaN result."""
    probs = _validate.finite_values("probs", torch.as_tensor(probs)).double()
    dim = _dim(dim, probs)
    _validate.distributions("probs", probs, dim)
    h = -torch.xlogy(probs, probs).sum(dim)
    return h / LOG2 if bits else h


@checked
def kl_divergence(p: Float[Array, "*S"], log_q: Float[Array, "*S"], dim=-1, bits: Flag = False) -> Tensor:
    """KL(p || q) = sum_k p_k (log p_k - log q_k) along ``dim``, from probabilities ``p`` and
    log-probabilities ``log_q`` (e.g. a model's log_softmax), in nats, or bits if ``bits``."""
    p = _validate.finite_values("p", torch.as_tensor(p)).double()
    dim = _dim(dim, p)
    _validate.distributions("p", p, dim)
    log_q = torch.as_tensor(log_q).double()
    if torch.isnan(log_q).any():
        _validate.fail("log_q", "log-probabilities without NaN", log_q)
    q_sums = log_q.exp().sum(dim)  # where p is a distribution, q must be one too (up to float32 rounding)
    if (((q_sums - 1).abs() > 1e-3) & (p.sum(dim) != 0)).any():
        _validate.fail("log_q", f"log-probabilities along dim {dim} (exp(log_q) summing to 1, e.g. a log_softmax)",
                       f"exp(log_q) summing to {q_sums.min().item():.4g} to {q_sums.max().item():.4g}", described=True)
    kl = (torch.xlogy(p, p) - torch.where(p > 0, p * log_q, torch.zeros_like(p))).sum(dim)
    return kl / LOG2 if bits else kl


# ----------------------------------------------------------------------------- attention

@checked
def attention_entropy(alpha: Maps) -> Float[Tensor, "*B T"]:
    """Entropy in nats of every attention row, shape (..., T). Masked keys (alpha = 0) add nothing."""
    alpha = _check_alpha(alpha)
    return entropy(alpha).to(alpha.dtype)


@checked
def attention_mass(alpha: Maps, key_mask: Shaped[Array, "*B T"]) -> Float[Tensor, "*B T"]:
    """sum_{j: key_mask_j} alpha_ij for every query, shape (..., T). ``key_mask`` is (..., T) over keys."""
    alpha = _check_alpha(alpha)
    return (alpha * _key_weights(alpha, key_mask)).sum(-1)


def _key_weights(alpha, key_mask):
    """key_mask (..., T) over keys (its shape checked by the signature), as (..., 1, T) in alpha's dtype."""
    key_mask = torch.as_tensor(key_mask, device=alpha.device)
    if not ((key_mask == 0) | (key_mask == 1)).all():  # a set of keys, not weights: 0.5 is no flag
        _validate.fail("key_mask", "flags (bool, or 0 and 1) marking a set of keys", key_mask)
    return key_mask[..., None, :].to(alpha.dtype)


@checked
def attention_received(alpha: Maps) -> Float[Tensor, "*B T"]:
    """How much attention each key receives, relative to uniform attention: the mean over the queries
    that can see key j of alpha_ij * n_i, where n_i is the number of keys query i sees. Shape (..., T);
    1 means "as much as uniform attention would give". Maps with an all-zero upper triangle are read
    as causal (query i sees keys 0..i), others as full."""
    alpha = _check_alpha(alpha)
    T = alpha.shape[-1]
    visible = torch.ones(T, T, dtype=torch.bool, device=alpha.device)
    if bool((alpha.triu(1) == 0).all()):
        visible = visible.tril()
    n_keys = visible.sum(-1, keepdim=True).to(alpha.dtype)   # (T, 1): keys per query
    n_queries = visible.sum(-2).to(alpha.dtype)              # (T,): queries per key
    return (alpha * n_keys).sum(-2) / n_queries


@checked
def advantage_flow(alpha: Maps, advantage: Float[Array, "*B T T"], key_mask: Shaped[Array, "*B T"]) -> Float[Tensor, "*B T"]:
    """sum_{j in key_mask} alpha_ij A_ij per query, shape (..., T): -dL/dc, where c raises the scores
    of every key in the set by the same amount.

    Positive: gradient descent raises the set's scores together, so the attention mass on the set
    grows. It is the advantage law summed over a set, which is what shared key weights see: the
    keys of all signal positions share W_K, so they gain or lose attention together.
    """
    alpha = _check_alpha(alpha)
    advantage = _validate.finite_values("advantage", torch.as_tensor(advantage))
    return (alpha * advantage * _key_weights(alpha, key_mask)).sum(-1)


@checked
def predicted_attention_change(alpha: Maps, advantage: Float[Array, "*B T T"], eta: Positive = 1.0) -> Float[Tensor,
                               "*B T T"]:
    """The first-order change of alpha after one gradient step of size eta taken on the scores
    themselves, ds_ij = eta alpha_ij A_ij:  d alpha_ij = alpha_ij (ds_ij - sum_k alpha_ik ds_ik).

    This is what the advantage law predicts for the next step's attention if scores were free
    parameters; in a head they are tied through W_Q and W_K, and a chapter measures how well the
    prediction survives that.
    """
    # eta: Positive, a step size: a negative one would be a step of gradient ascent
    alpha = _check_alpha(alpha)
    advantage = _validate.finite_values("advantage", torch.as_tensor(advantage))
    ds = eta * alpha * advantage
    return alpha * (ds - (alpha * ds).sum(-1, keepdim=True))


def compatibility_and_advantage(x, y, params, causal=True):
    """The monitors of the paper for one batch: b_ij = u_i . v_j, A_ij = E_{alpha_i}[b] - b_ij and
    dL/ds_ij = -alpha_ij A_ij, each (..., T, T), from the closed-form gradients (no autograd)."""
    if not hasattr(params, "items"):
        _validate.fail("params", f"a mapping with keys {attention.PARAM_NAMES}", type(params).__name__, described=True)
    params = {name: p.detach() if isinstance(p, torch.Tensor) else p for name, p in params.items()}
    g = attention.gradients(x, y, params, causal)
    return {"b": g["b"], "advantage": g["advantage"], "score_grad": g["s"], "u": g["u"]}


@checked
def attended_compatibility(alpha: Maps, u: Float[Array, "*B T d"], v: Float[Array, "*B T d"]) -> Float[Tensor, "*B T"]:
    """E_{alpha_i}[cos(u_i, v_j)] for every query, shape (..., T).

    The paper's compatibility b_ij = u_i . v_j, with the lengths divided out, so that it can be
    followed through training while u shrinks and v grows. It falls below 0 as the values a query
    attends to come to point against its error signal u_i: the values have specialised to serve it.
    """
    alpha = _check_alpha(alpha)
    u, v = _validate.finite_values("u", torch.as_tensor(u)), _validate.finite_values("v", torch.as_tensor(v))
    u_hat = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    v_hat = v / v.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    cos = u_hat @ v_hat.transpose(-1, -2)  # (..., i, j)
    return (alpha * cos).sum(-1)


@checked
def value_pull(alpha: Maps, u: Float[Array, "*B T d"]) -> Float[Tensor, "*B T d"]:
    """-dL/dv_j = -sum_i alpha_ij u_i for every value, shape (..., T, d): where gradient descent
    would move each value if it were a free vector (the responsibility-weighted error signal)."""
    alpha = _check_alpha(alpha)
    return -(alpha.transpose(-1, -2) @ _validate.finite_values("u", torch.as_tensor(u)))


@checked
def movement_toward(delta_v: Float[Array, "*B Tj d"], u: Float[Array, "*B Ti d"]) -> Float[Tensor, "*B Ti Tj"]:
    """How far each value moved against each query's error signal: delta_v_j . (-u_i / |u_i|),
    shape (..., T_i, T_j). The paper's value law says it grows with the responsibility alpha_ij."""
    delta_v = _validate.finite_values("delta_v", torch.as_tensor(delta_v))
    u = _validate.finite_values("u", torch.as_tensor(u))
    u_hat = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return -(u_hat @ delta_v.transpose(-1, -2))


# ----------------------------------------------------------------------------- speeds

@checked
def relative_change(before: Shaped[Array, "*S"], after: Shaped[Array, "*S"]) -> float:
    """||after - before|| / ||before|| (Frobenius over everything): how much a quantity moved."""
    before, after = torch.as_tensor(before), torch.as_tensor(after)
    _validate.finite_values("before", before)
    _validate.finite_values("after", after)
    norm = before.double().norm().item()
    if norm == 0:
        _validate.fail("before", "a nonzero tensor (a relative change of 0 is undefined)", "only zeros", described=True)
    return (after.double() - before.double()).norm().item() / norm


@checked
def change_vs_final(snapshots: Shaped[Array, "n _ *rest"]) -> np.ndarray:
    """(n - 1,) ||s[t+1] - s[t]|| / ||s[-1]|| for n snapshots stacked on the first axis: how much a
    quantity moved between snapshots, against the size it ends at. Unlike ``relative_change``
    (against the size it has now) it does not inflate the moves of something that starts small."""
    s = _validate.finite_values("snapshots", torch.as_tensor(snapshots)).double()
    final = s[-1].norm().item()
    if final == 0:
        _validate.fail("snapshots", "a nonzero last snapshot (the scale of the rates)", "a last snapshot of zeros",
                       described=True)
    return ((s[1:] - s[:-1]).flatten(1).norm(dim=1) / final).cpu().numpy()


@checked
def frame_change(before: Float[Array, "*B Tq Tk"], after: Float[Array, "*B Tq Tk"], check: Flag = True) -> float:
    """The frame rate between two snapshots of attention maps (..., queries, keys): the mean over
    query rows of the total-variation distance 1/2 sum_j |alpha'_ij - alpha_ij|, in [0, 1].

    A distance between probability rows, so it means the same whatever the scale of the scores,
    unlike a relative norm of alpha (which small, nearly uniform maps inflate). ``check=False``
    skips the check that every row is a distribution, for maps a softmax has just made: on a
    (500 x 2000) map it is most of the time."""
    before, after = torch.as_tensor(before), torch.as_tensor(after)
    for name, maps in (("before", before), ("after", after)) if check else ():  # rows: distributions over keys
        _validate.distributions(name, _validate.finite_values(name, maps).double(), -1)
    return 0.5 * (after.double() - before.double()).abs().sum(-1).mean().item()


def _check_curve(steps, values, name):
    steps, values = np.asarray(steps), _validate.number_array(name, values)
    if steps.ndim != 1 or values.shape != steps.shape or len(steps) == 0:
        _validate.fail(f"steps, {name}", "two 1-D arrays of the same nonzero length",
                       f"{steps.shape} and {values.shape}", described=True)
    if not np.issubdtype(steps.dtype, np.number) or not np.isfinite(steps).all() or (np.diff(steps) <= 0).any():
        _validate.fail("steps", "strictly increasing finite numbers", steps)
    return steps, values


@checked
def settling_step(steps, rates, threshold: Positive):
    """The first step from which ``rates`` stays below ``threshold`` to the end (steps[0] if always,
    None if it is still above at the last step)."""
    steps, rates = _check_curve(steps, rates, "rates")
    above = np.nonzero(~(rates < threshold))[0]  # nan counts as "not settled"
    if len(above) == 0:
        return int(steps[0])
    if above[-1] == len(steps) - 1:
        return None
    return int(steps[above[-1] + 1])


SETTLE_FRACTIONS = (0.2, 0.1)  # a pathway has settled once its rate stays below this share of its own peak
SETTLE_WINDOW = 5              # rates are smoothed over this many intervals first (a centred running mean)
SETTLE_MIN_SPAN = 0.2          # ... and stays there for at least this share of the run: an end-of-run dip is no evidence


def _smooth(rates, window):
    if window <= 1 or len(rates) < window:
        return rates
    kernel = np.ones(window) / window
    padded = np.pad(rates, (window // 2, window - 1 - window // 2), mode="edge")
    return np.convolve(padded, kernel, mode="valid")


Fractions = Distinct("fractions", "a fraction", "settle step")   # settle's, and dynamics.summarise's


@checked
def settle(steps, rates, fractions: Fractions = SETTLE_FRACTIONS, window: Whole(1) = SETTLE_WINDOW,
           min_span: Real(0, 1, high_open=True) = SETTLE_MIN_SPAN):
    """The course's one settle measure: a change rate against its own peak.

    ``rates[t]`` is how fast a pathway moved in the interval ending at ``steps[t]`` (a frame rate,
    a precision rate). The rates are smoothed by a centred running mean over ``window`` intervals
    (at most as many as there are rates; a run of fewer than the default ``SETTLE_WINDOW`` is left
    unsmoothed), then compared with their own peak, which makes the measure scale-free (a TV distance and a
    relative norm compare fairly) and not bound by the run's length: a pathway whose rate is still
    rising, or has not fallen far from its peak, is reported as not settled, not as settling at the
    end of the run. A settled state must also *last*: a step later than the last ``min_span`` of the
    run (from steps[0] to the last step) counts as not settled, so that a dip in the last few
    snapshots, where the smoothing pads the edge, decides nothing. Returns a dict:

    ``peak_step``, ``peak_rate``   where the smoothed rate peaks, and its value
    ``settled``  {fraction: the first step after the peak from which the smoothed rate stays below
                 fraction x peak to the end of the run, or None: "not settled by step ``last_step``"}
    ``last_step``, ``last_ratio``  the run's last step and its smoothed rate there / peak
    ``latest``   the latest step that counts as settled (``last_step`` minus ``min_span`` of the run)

    Under constant-rate SGD a rate does not fall to zero: it falls to the noise floor of the
    gradient, and where that floor sits against the peak depends on how often the run was
    photographed (``drift_ratio`` measures it). A settle step is then a property of the snapshot
    interval as much as of the run: report it at two intervals, or not at all.
    """
    steps, rates = _check_curve(steps, rates, "rates")
    _sample("rates", rates)
    if (rates < 0).any():
        _validate.fail("rates", "change rates >= 0", f"a minimum of {rates.min():g}", described=True)
    if isinstance(fractions, str) or not hasattr(fractions, "__iter__"):
        _validate.fail("fractions", "a tuple of fractions in (0, 1), e.g. (0.2, 0.1)", fractions)
    fractions = tuple(_validate.real("fractions", f, 0, 1, low_open=True, high_open=True) for f in fractions)
    if not fractions:
        _validate.fail("fractions", "a tuple of fractions in (0, 1), e.g. (0.2, 0.1)", fractions)
    if window > len(rates) and window != SETTLE_WINDOW:   # the default skips a short run's smoothing, as said above
        _validate.fail("window", f"at most the number of rates ({len(rates)}), or 1 for no smoothing", window)
    smooth = _smooth(rates, window)
    k = int(np.argmax(smooth))
    peak = float(smooth[k])
    latest = float(steps[-1] - min_span * (steps[-1] - steps[0]))
    out = {"peak_step": int(steps[k]), "peak_rate": peak, "last_step": int(steps[-1]),
           "last_ratio": float(smooth[-1] / peak) if peak > 0 else math.nan, "latest": latest, "settled": {}}
    for f in fractions:
        at = None if peak == 0 else settling_step(steps[k:], smooth[k:], f * peak)
        # below f x peak already at the peak cannot happen for f < 1; too late to have lasted is no evidence
        out["settled"][f] = None if at is None or at == int(steps[k]) or at > latest else at
    return out


@checked
def drift_ratio(short, long, k: Whole(2)):
    """How much of a change rate is drift, from one run measured at two snapshot intervals, n and k x n.

    ``short`` (..., k x m) holds the rates between snapshots n updates apart and ``long`` (..., m)
    those between snapshots k x n apart, over the same updates (a distance: a TV distance, a norm).
    Returns (..., m) long / (sum of the k short rates it spans), in [0, 1] by the triangle
    inequality: 1 for a steady drift (k short moves add up), about 1/sqrt(k) for a random walk,
    and about 1/k for noise around a fixed point (past its correlation time the long move is no
    longer than one short one). A rate with a ratio near 1/k is noise, not learning."""
    short, long = _validate.number_array("short", short), _validate.number_array("long", long)
    if short.ndim < 1 or short.shape[:-1] != long.shape[:-1] or short.shape[-1] != k * long.shape[-1]:
        _validate.fail("short, long", f"rates of shapes (..., {k} x m) and (..., m)",
                       f"{short.shape} and {long.shape}", described=True)
    for name, rates in (("short", short), ("long", long)):
        if (_sample(name, rates) < 0).any():   # distances: a negative one is not a rate of change
            _validate.fail(name, "change rates >= 0 (distances)", f"a minimum of {rates.min():g}", described=True)
    spanned = short.reshape(*long.shape, k).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(spanned > 0, long / spanned, np.nan)


def _settled_at(name, result, fraction, keys=()):
    """``result["settled"][fraction]`` of a ``settle`` result holding ``keys``, after checking that it is one."""
    if not isinstance(result, dict) or not isinstance(result.get("settled"), dict) or not set(keys) <= result.keys():
        _validate.fail(name, f"a result of diagnostics.settle (a dict with {['settled', *keys]})", result)
    if fraction not in result["settled"]:
        _validate.fail("fraction", f"one of the fractions {name} was computed for, {list(result['settled'])}", fraction)
    return result["settled"][fraction]


def settle_order(frame, values, fraction=SETTLE_FRACTIONS[0]):
    """Which pathway settled first, in words, from two ``settle`` results at ``fraction``:
    "frame first", "values first", "together", or what did not settle (by the run's last step,
    named when the result carries it, as ``settle``'s do)."""
    tf, tv = _settled_at("frame", frame, fraction), _settled_at("values", values, fraction)
    by = f" by step {frame['last_step']}" if "last_step" in frame else ""
    if tf is None and tv is None:
        return f"neither settled{by}"
    if tf is None:
        return f"values first (frame not settled{by})"
    if tv is None:
        return f"frame first (values not settled{by})"
    return "frame first" if tf < tv else "values first" if tv < tf else "together"


def settle_text(result, fraction=SETTLE_FRACTIONS[0]):
    """One line for a ``settle`` result: "settles at step 640 (20% of its peak at 120)" or
    "not settled by step 1000 (at 43% of its peak at 900)"."""
    step = _settled_at("result", result, fraction, ("peak_step", "last_step", "last_ratio"))
    if step is None:
        return (f"not settled by step {result['last_step']} (at {result['last_ratio']:.0%} of its peak "
                f"at {result['peak_step']})")
    return f"settles at step {step} ({fraction:.0%} of its peak at {result['peak_step']})"


def bought_in_window(attribution, loss, k):
    """Who bought a loss decrease over a window that starts at snapshot ``k`` and runs to the end:
    {group: the sum of its per-interval attribution (..., intervals) from interval k on}, and "realised",
    the loss at snapshot k minus the last (..., snapshots). Interval i runs from snapshot i to i + 1.
    Chapter 6's runs and chapter 9's records both read their late windows through it."""
    if not isinstance(attribution, dict) or not attribution:
        _validate.fail("attribution", "a non-empty dict {group: (..., intervals) per-interval decreases}", attribution)
    loss = _validate.number_array("loss", loss)
    if loss.ndim == 0 or loss.shape[-1] < 2:
        _validate.fail("loss", "(..., snapshots) losses, at least 2 snapshots", loss)
    arrays = {g: _validate.number_array(f"attribution[{g!r}]", a) for g, a in attribution.items()}
    for g, a in arrays.items():   # interval i runs from snapshot i to i + 1
        if a.ndim == 0 or a.shape[-1] != loss.shape[-1] - 1:
            _validate.fail(f"attribution[{g!r}]", f"{loss.shape[-1] - 1} intervals (one between each two of the "
                           f"{loss.shape[-1]} snapshots of loss)", a.shape[-1] if a.ndim else a)
    k = _validate.integer("k", k, 0, loss.shape[-1] - 2)
    out = {g: a[..., k:].sum(-1) for g, a in arrays.items()}
    out["realised"] = loss[..., k] - loss[..., -1]
    return out


@checked
def progress_step(steps, curve, fraction: Real(0, 1, low_open=True)):
    """The first step at which ``curve`` has covered ``fraction`` of its change from first to last value."""
    steps, curve = _check_curve(steps, curve, "curve")
    _sample("curve", curve)  # a NaN would make the share of progress meaningless
    total = curve[-1] - curve[0]
    if total == 0:
        return int(steps[0])
    progress = (curve - curve[0]) / total
    return int(steps[np.argmax(progress >= fraction - 1e-12)])


# ----------------------------------------------------------------------------- geometry, statistics

def pca(points, n_components=2):
    """Principal components of (n, d) points.

    Returns a dict: mean (d,), components (n_components, d) (unit rows), explained (the share of the
    total variance of each of *all* min(n, d) components, summing to 1) and projected (n, n_components).
    """
    p = _validate.number_array("points", points, "(n, d) points: a tensor, array or nested list of numbers")
    _validate.matrix("points", p, min_rows=2)
    _sample("points", p)
    n_components = _validate.integer("n_components", n_components, 1, min(p.shape))
    mean = p.mean(0)
    centred = p - mean
    # eigenvectors of the (d, d) scatter matrix, not an SVD of the (n, d) cloud: the same components,
    # far cheaper when n >> d (thousands of values, a few dimensions), as every chapter has it
    var, vecs = np.linalg.eigh(centred.T @ centred)
    order = np.argsort(var)[::-1][:min(p.shape)]
    var, vecs = np.clip(var[order], 0, None), vecs[:, order]
    if var.sum() <= 0:
        _validate.fail("points", "points that are not all the same (with no variance, no direction explains any)",
                       f"{p.shape[0]} identical points", described=True)
    explained = var / var.sum()
    components = vecs.T[:n_components]
    return {"mean": mean, "components": components, "explained": explained,
            "projected": (p - mean) @ components.T}


def _sample(name, a):
    """A flat float64 numpy copy of a sample (tensor, array or list of numbers), all finite."""
    a = _validate.number_array(name, a, "a sample of numbers (a tensor, an array or a list)").ravel()
    if not np.isfinite(a).all():
        _validate.fail(name, "finite values", f"{int((~np.isfinite(a)).sum())} NaN/inf entries", described=True)
    return a


def _flat_pair(a, b):
    a, b = _sample("a", a), _sample("b", b)
    if a.shape != b.shape or a.size < 2:
        _validate.fail("a, b", "two samples of the same size >= 2", f"{a.size} and {b.size}", described=True)
    return a, b


def pearson(a, b):
    """Pearson correlation of two samples of the same size (flattened). nan if one is constant."""
    a, b = _flat_pair(a, b)
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else math.nan


def _ranks(a):
    """Ranks 0..n-1 with ties given their mean rank."""
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a))
    ranks[order] = np.arange(len(a), dtype=float)
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def spearman(a, b):
    """Spearman rank correlation (Pearson on ranks, ties averaged)."""
    a, b = _flat_pair(a, b)
    return pearson(_ranks(a), _ranks(b))


def mean_sd(values):
    """(mean, sd) of a sample (tensor, array or list of numbers, flattened), as floats: the course's
    "mean ± sd over seeds". sd is the sample standard deviation (ddof=1), the estimate of the spread
    between seeds; one value has no spread to estimate, so its sd is nan (never a misleading 0)."""
    values = _sample("values", values)
    if values.size == 0:
        _validate.fail("values", "at least one number", values)
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else math.nan


# ----------------------------------------------------------------------------- wind-tunnel metrics
# Scores of a model's logits against a wind tunnel's exact posterior (``wind_tunnels.WindTunnelBatch``), in
# bits, over the scored positions only. Computed in float64 so that errors of 1e-4 bits are real.



def entropy_bits(probs):
    """Entropy in bits of distributions over the last axis (0 log 0 = 0), shape probs.shape[:-1]."""
    return entropy(probs, bits=True)


@checked
def _logits_and_batch(logits: Float[Array, "B T C"], batch: WindTunnelBatch):
    logits = _validate.finite_values("logits", torch.as_tensor(logits))
    _validate.shape("logits", logits, batch.posterior.shape, "the shape of the batch's posterior (B, T, n_classes) =")
    scored = logits[batch.mask.to(logits.device)]   # the unscored rows of a posterior are all 0
    if logits.shape[-1] > 1 and scored.numel() and (logits >= 0).all() and torch.allclose(
            scored.sum(-1), torch.ones((), dtype=logits.dtype)):
        _validate.fail("logits", "the model's logits (before the softmax; for probabilities p pass p.log())",
                       "rows of entries in [0, 1] that each sum to 1: probabilities", described=True)
    if not batch.mask.any():
        _validate.fail("batch", "at least one scored position", "none", described=True)
    sums = batch.posterior[batch.mask].double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):   # float32 posteriors
        _validate.fail("batch.posterior", "a distribution over the classes at every scored position",
                       f"sums from {sums.min():.4g} to {sums.max():.4g}", described=True)
    log_q = torch.log_softmax(logits.detach().double(), dim=-1)
    return log_q, batch.posterior.to(logits.device).double(), batch.mask.to(logits.device)


def _entropy_gap(logits, batch, signed=False):
    log_q, p, mask = _logits_and_batch(logits, batch)
    gap = entropy(log_q.exp(), bits=True) - entropy(p, bits=True)
    return (gap if signed else gap.abs()), mask


def entropy_error_bits(logits, batch):
    """Paper I's metric: the mean over scored positions of |H(softmax(logits)) - H(posterior)|, in bits.

    It compares only how *uncertain* the model is with how uncertain Bayes is; ``kl_bits`` also checks
    that the model is uncertain about the right values. Returns a 0-d float64 tensor."""
    gap, mask = _entropy_gap(logits, batch)
    return gap[mask].mean()


def entropy_bias_bits(logits, batch):
    """The signed mean over scored positions of H(softmax(logits)) - H(posterior), in bits (0-d float64):
    > 0 when the model is on average *less* confident than Bayes, < 0 when more. Beside
    ``entropy_error_bits`` it says whether the error has a direction (a recipe that keeps the logits
    small, such as weight decay, errs on the positive side)."""
    gap, mask = _entropy_gap(logits, batch, signed=True)
    return gap[mask].mean()


def kl_bits(logits, batch):
    """The mean over scored positions of KL(posterior || softmax(logits)) in bits (0-d float64 tensor).
    The excess cross-entropy of the model over Bayes: 0 only if the model's prediction is the posterior."""
    log_q, p, mask = _logits_and_batch(logits, batch)
    return kl_divergence(p, log_q, bits=True)[mask].mean()


def _per_position(values, mask):
    """The mean of (B, T) ``values`` over the sequences scored at each position, (T,); nan where none is."""
    counts = mask.sum(0)
    total = (values * mask).sum(0)
    return torch.where(counts > 0, total / counts.clamp_min(1), torch.full_like(total, math.nan))


def per_position_error_bits(logits, batch):
    """|H(model) - H(posterior)| in bits averaged over the batch at each position, shape (T,);
    nan where no sequence is scored."""
    gap, mask = _entropy_gap(logits, batch)
    return _per_position(gap, mask)


def per_position_kl_bits(logits, batch):
    """KL(posterior || softmax(logits)) in bits averaged over the batch at each position, shape (T,);
    nan where no sequence is scored."""
    log_q, p, mask = _logits_and_batch(logits, batch)
    return _per_position(kl_divergence(p, log_q, bits=True), mask)


# ----------------------------------------------------------------------------- Paper I's geometry
# The three signatures Paper I reads off a trained transformer (chapter 7): orthogonal keys, queries
# that focus layer by layer, and values on a low-dimensional manifold ordered by posterior entropy.

@checked
def group_means(vectors: Finite[Shaped[Array, "n d"]], labels: Shaped[Array, " n"]):
    """The mean of the rows of ``vectors`` (n, d) sharing each label (n,): returns (labels present,
    sorted) and their means (n_labels, d). E.g. one key vector per token, averaged over positions."""
    vectors, labels = torch.as_tensor(vectors), torch.as_tensor(labels)
    if labels.is_floating_point() or labels.is_complex():  # 0.1 + 0.2 and 0.3 would be two groups
        _validate.fail("labels.dtype", "an integer dtype (token ids or class indices)", labels.dtype)
    present, inverse = torch.unique(labels, return_inverse=True)
    sums = torch.zeros(len(present), vectors.shape[1], dtype=torch.float64).index_add_(0, inverse, vectors.double())
    counts = torch.bincount(inverse, minlength=len(present)).double()
    return present, sums / counts[:, None]


@checked
def key_orthogonality(keys: Finite[Shaped[Array, "n d"]]) -> float:
    """Mean |cosine| between distinct rows of ``keys`` (n >= 2, d): 0 for orthogonal keys, 1 for
    parallel ones. Paper I's check: below 0.1 for the layer-0 keys of a trained transformer. Random
    directions in d dimensions give about sqrt(2 / (pi d))."""
    keys = torch.as_tensor(keys).double()
    _validate.matrix("keys", keys, min_rows=2)
    if (keys.norm(dim=-1) == 0).any():   # a zero key has no direction: its cosine with anything is undefined
        _validate.fail("keys", "nonzero rows (each key a direction)", f"{int((keys.norm(dim=-1) == 0).sum())} zero rows",
                       described=True)
    unit = keys / keys.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    cos = unit @ unit.T
    off = ~torch.eye(len(keys), dtype=torch.bool)
    return cos.abs()[off].mean().item()


_FLOORS = {}


@checked
def orthogonality_floor(n: Whole(2), d: Whole(1), centred: Flag = False, starts: Whole(1) = 8, steps: Whole(1) = 1500,
                        seed: Seed = 0):
    """The least mean |cos| (``key_orthogonality``) that n vectors in d dimensions can have, found
    numerically: Adam on the mean |cos| from ``starts`` random starts, the best kept. With
    ``centred`` the vectors must sum to zero (keys after removing their mean over tokens).

    A computed floor, not a formula: n <= d vectors can be orthogonal (floor 0), more cannot; n
    centred vectors cannot all be orthogonal, and with unequal lengths they can get well below the
    regular simplex's 1/(n-1) (three vectors in a plane: towards 1/3, not 1/2; the best such
    configurations are degenerate, one pair nearly opposite and the rest nearly orthogonal). The
    best configuration found is an upper estimate of the floor: a measured cosine below it would
    be a bug, one near it is as orthogonal as n vectors in d dimensions get. Cached per arguments."""
    # starts, steps >= 1: with 0, no floor would be found
    if not centred and n <= d:
        return 0.0  # exactly: n orthonormal vectors exist
    key = (n, d, bool(centred), starts, steps, seed)
    if key not in _FLOORS:
        gen = torch.Generator().manual_seed(seed)
        free = torch.randn(starts, n - 1 if centred else n, d, generator=gen, dtype=torch.float64).requires_grad_()
        opt = torch.optim.Adam([free], lr=0.01)
        off = ~torch.eye(n, dtype=torch.bool)

        def mean_abs_cos():
            x = torch.cat([free, -free.sum(1, keepdim=True)], 1) if centred else free
            unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            return (unit @ unit.transpose(1, 2)).abs()[:, off].mean(-1)     # (starts,)

        for _ in range(steps):
            opt.zero_grad()
            mean_abs_cos().sum().backward()
            opt.step()
        with torch.no_grad():
            _FLOORS[key] = float(mean_abs_cos().min())
    return _FLOORS[key]


@checked
def value_manifold(points: Shaped[Array, "n d"], entropy: Shaped[Array, " n"]) -> dict:
    """PCA of value-side vectors (n, d) against the posterior entropy (n,) of the same positions.

    Returns a dict: pc1_share (share of the variance on the first principal component), spearman
    (rank correlation of the PC1 coordinate with the entropy, sign fixed to be >= 0 by orienting PC1)
    and pc1 (n,) the oriented coordinates. Paper I's check: PC1 > 80% and a strong correlation."""
    points = _validate.finite_values("points", torch.as_tensor(points))
    entropy = _validate.finite_values("entropy", torch.as_tensor(entropy))
    _validate.matrix("points", points, min_rows=3)   # two points always give PC1 = 100% and |spearman| = 1
    result = pca(points, n_components=1)
    pc1 = result["projected"][:, 0]
    rho = spearman(pc1, entropy)
    if rho < 0:  # a principal axis has no sign: orient it so that it grows with the entropy
        pc1, rho = -pc1, -rho
    return {"pc1_share": float(result["explained"][0]), "spearman": rho, "pc1": pc1}


@checked
def within_position_spearman(points: Shaped[Array, "n d"] | Shaped[Array, " n"], entropy: Shaped[Array, " n"],
                             positions: Shaped[Array, " n"]) -> float:
    """The ordering by entropy *within* a position: the mean over positions of |Spearman(PC1, entropy)|
    among the points of that position (a partial correlation that holds the position fixed).

    ``points`` (n, d) vectors, whose first principal component is taken over all n points as in
    ``value_manifold``, or (n,) coordinates already projected (e.g. its "pc1"); ``entropy`` (n,) the
    posterior entropy and ``positions`` (n,) the position of each point. Where the entropy depends on
    the position, ``value_manifold``'s Spearman can be position alone; this cannot. A position whose
    entropy or PC1 is constant (to 1e-6, relative), or that has fewer than 3 points, has no ordering
    to measure and is left out; nan when none is left (the bijection, whose entropy is a function of
    the position)."""
    points = _validate.finite_values("points", torch.as_tensor(points))
    entropy = _validate.finite_values("entropy", torch.as_tensor(entropy))
    positions = _validate.finite_values("positions", torch.as_tensor(positions))
    pc1 = pca(points, n_components=1)["projected"][:, 0] if points.dim() == 2 else _sample("points", points)
    h, where = _sample("entropy", entropy), _sample("positions", positions)

    def varies(a):
        return np.ptp(a) > 1e-6 * max(1.0, float(np.abs(a).max()))

    rhos = [abs(spearman(pc1[where == p], h[where == p])) for p in np.unique(where)
            if (where == p).sum() >= 3 and varies(h[where == p]) and varies(pc1[where == p])]
    return float(np.mean(rhos)) if rhos else math.nan


def _residual_stream(model, tokens):
    """The input of the model's final LayerNorm (the last block's output), (B, T, d_model), or None."""
    final = getattr(model, "ln_f", None)
    if final is None:
        return None
    kept = []
    handle = final.register_forward_pre_hook(lambda module, args: kept.append(args[0].detach()))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
    return kept[0]


def _check_token_groups(token_groups, tokens):
    """{name: token ids}, each group with at least two of the tokens in the batch (a cosine needs a pair)."""
    if token_groups is None:
        return
    if not hasattr(token_groups, "items"):
        _validate.fail("token_groups", "a dict {name: token ids}", token_groups)
    present = set(torch.unique(tokens).tolist())
    for name, ids in token_groups.items():
        try:
            found = present & {_validate.integer(f"token_groups[{name!r}]", i) for i in ids}
        except TypeError:
            _validate.fail(f"token_groups[{name!r}]", "a list of token ids", ids)
        if len(found) < 2:
            _validate.fail(f"token_groups[{name!r}]", "at least two token ids that occur in the batch",
                           f"{ids!r}, of which {sorted(found)} occur", described=True)


def _manifold(points, entropy):
    """``value_manifold``, or nan where a batch has fewer than 3 scored positions (a manifold of 2 points
    would read as a perfect one)."""
    if len(points) < 3:
        return {"pc1_share": math.nan, "spearman": math.nan, "pc1": torch.full((len(points),), math.nan)}
    return value_manifold(points, entropy)


@checked
def bayesian_geometry(model, batch: WindTunnelBatch, token_groups=None):
    """Paper I's three signatures of a transformer on a wind-tunnel batch (``wind_tunnels.WindTunnelBatch``),
    read through the probe points of its attention layers (``models.run_with_probes``):

    - keys: ``key_orthogonality`` of the layer-0 keys, one vector per token (the mean over every
      position and sequence where the token occurs), per head, then averaged over heads; "keys" uses
      the vectors as they are (Paper I's definition), "keys_centred" after removing their mean over
      tokens, the one component attention cannot see (adding a vector c to every key adds q_i . c to
      every score of query i, which the softmax ignores). With ``token_groups`` ({name: token ids},
      e.g. a task's ``token_groups()``) also "key_groups": {name: {"n", "keys", "keys_centred"}},
      the same within each group (centred on the group's mean), where fewer tokens compete for the
      head's dimensions
    - attention_entropy_bits: for every layer, the mean entropy in bits of the attention rows of the
      scored queries (mean over heads): query focusing is this falling from layer to layer
    - the value manifold of the last layer: its per-head outputs g_i = sum_j alpha_ij v_j at the scored
      positions (heads concatenated) against the posterior entropy there (``value_manifold``):
      pc1_share, spearman (nan with fewer than 3 scored positions), and the points pc1 and entropy (bits)
      for plotting; the same for each head
      alone ("pc1_share_heads", "spearman_heads") and for the residual stream that the readout sees
      ("pc1_share_residual", "spearman_residual")
    """
    _check_token_groups(token_groups, batch.tokens)
    records = models.run_with_probes(model, batch.tokens, ("probe_k", "probe_alpha", "probe_g"))
    k = records[0]["k"]
    B, H, T, d = k.shape
    tokens = batch.tokens.reshape(-1).to(k.device)
    raw, centred = [], []
    per_head = [group_means(k[:, h].reshape(-1, d), tokens) for h in range(H)]  # (tokens present, means)
    for _, means in per_head:
        raw.append(key_orthogonality(means))
        centred.append(key_orthogonality(means - means.mean(0)))
    mask = batch.mask.to(k.device)
    focus = [attention_entropy(r["alpha"]).transpose(1, 2)[mask].mean().item() / LOG2 for r in records]
    g = records[-1]["g"].transpose(1, 2).reshape(B, T, -1)[mask]
    entropy = entropy_bits(batch.posterior.to(k.device)[mask])
    manifold = _manifold(g, entropy)
    heads = [_manifold(records[-1]["g"][:, h][mask], entropy) for h in range(H)]
    out = {"keys": float(np.mean(raw)), "keys_centred": float(np.mean(centred)), "n_tokens": len(torch.unique(tokens)),
           "attention_entropy_bits": focus, "pc1_share": manifold["pc1_share"],
           "spearman": manifold["spearman"], "pc1": manifold["pc1"], "entropy": entropy.cpu().numpy(),
           "pc1_share_heads": [m["pc1_share"] for m in heads], "spearman_heads": [m["spearman"] for m in heads]}
    residual = _residual_stream(model, batch.tokens)
    if residual is not None:
        stream = _manifold(residual[mask.to(residual.device)], entropy.to(residual.device))
        out["pc1_share_residual"], out["spearman_residual"] = stream["pc1_share"], stream["spearman"]
    if token_groups:
        out["key_groups"] = {}
        for name, ids in token_groups.items():
            ids = torch.as_tensor(list(ids), device=k.device)
            raw_g, centred_g = [], []
            for present, means in per_head:
                means = means[torch.isin(present, ids)]
                raw_g.append(key_orthogonality(means))
                centred_g.append(key_orthogonality(means - means.mean(0)))
            out["key_groups"][name] = {"n": len(means), "keys": float(np.mean(raw_g)),
                                       "keys_centred": float(np.mean(centred_g))}
    return out
