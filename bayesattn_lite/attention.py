"""One attention head and its first-order gradients, written out by hand.

The setting of the paper (one head, no residual, no LayerNorm)::

    q_i = W_Q x_i,   k_j = W_K x_j,   v_j = W_V x_j
    s_ij = q_i . k_j / sqrt(d_k)          (-inf where the causal mask forbids j > i)
    alpha_ij = softmax_j(s_ij)
    g_i = sum_j alpha_ij v_j
    z_i = W_O g_i                         (logits over the classes)
    L = mean_i cross_entropy(z_i, y_i)    (mean over positions and batch elements)

Weights are stored as ``nn.Linear`` stores them, (out, in), so q = x @ W_Q.T.

``gradients`` returns dL/d(everything) from the closed-form formulas of the paper:

    u_i = dL/dg_i = W_O^T (softmax(z_i) - onehot(y_i)) / N
    b_ij = u_i . v_j = dL/dalpha_ij                      (compatibility)
    A_ij = E_{alpha_i}[b] - b_ij                          (advantage)
    dL/ds_ij = alpha_ij (b_ij - E_{alpha_i}[b]) = -alpha_ij A_ij
    dL/dq_i = sum_j dL/ds_ij k_j / sqrt(d_k),  dL/dk_j = sum_i dL/ds_ij q_i / sqrt(d_k)
    dL/dv_j = sum_i alpha_ij u_i
    dL/dW = sum_t (dL/d out_t) x_t^T for each projection

``closed_form_loss`` is ``loss`` with these formulas as its backward pass: what the training loops of
chapters 4 and 5 call (no autograd graph, and faster).

``scores`` is the one function for s_ij (``forward`` uses it; so do the chapter experiments).
``score_kernel`` and ``predicted_score_change`` (one sequence) give what a step on W_Q, W_K does
to the scores: Delta s = -lr K : dL/ds, K the score-space kernel (chapter 3's lemma).

Everything works on x of shape (T, d_x) or (B, T, d_x), float32 or float64, CPU or CUDA.
"""

import functools
import math
from collections.abc import Mapping

import torch
from torch import nn

from . import _validate
from ._types import Finite, Flag, Float, Int, NonNegative, Positive, Real, Seed, Tensor, Whole, checked

PARAM_NAMES = ("W_Q", "W_K", "W_V", "W_O")

# this module describes what it got in words already ("shape (3, 4)"), so the text goes in as is
_fail = functools.partial(_validate.fail, described=True)


# ----------------------------------------------------------------------------- what the head takes

@checked
def _fit(x: Float[Tensor, "*B T d_x"], W_Q: Float[Tensor, "d_k d_x"], W_K: Float[Tensor, "d_k d_x"],
         W_V: Float[Tensor, "d_v d_x"], W_O: Float[Tensor, "C d_v"], y: Int[Tensor, "*B T"] | None = None):
    """The head's inputs, checked against each other: the annotations say how the shapes fit (queries
    and keys share d_k, W_O reads the d_v values, one target per position); below, what they cannot say."""
    if x.shape[:-1].numel() == 0 or W_Q.shape[0] == 0:   # an empty batch would average over nothing: NaN
        _fail("x, W_Q", "at least one sequence, one position and d_k >= 1", f"x {tuple(x.shape)}, W_Q {tuple(W_Q.shape)}")
    for name, W in (("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O), ("y", y)):
        if W is not None and W.device != x.device:
            _fail(f"{name}.device", f"{x.device} (the device of x)", W.device)
        if name != "y" and W.dtype != x.dtype:
            _fail(f"{name}.dtype", f"{x.dtype} (the dtype of x)", W.dtype)
    for name, t in (("x", x), ("W_Q", W_Q), ("W_K", W_K), ("W_V", W_V), ("W_O", W_O)):
        _validate.finite_values(name, t.detach())   # NaN in must not become NaN out without a word
    if y is not None and y.numel() and (int(y.min()) < 0 or int(y.max()) >= W_O.shape[0]):
        _fail("y", f"class indices in [0, {W_O.shape[0] - 1}]", f"values from {int(y.min())} to {int(y.max())}")


def _check_inputs(x, params, y=None, name="params"):
    """Raise ValueError, naming what was expected, when x, the ``params`` mapping (W_Q, W_K, W_V,
    W_O; called ``name`` in the caller's signature) and the targets ``y`` (when given) do not fit together."""
    _validate.exact_keys(name, params, PARAM_NAMES)
    _fit(x, *(params[name] for name in PARAM_NAMES), y)


# ----------------------------------------------------------------------------- forward

@checked
def init_params(d_x: Whole(1), d_k: Whole(1), d_v: Whole(1), n_classes: Whole(2), std: Positive = 0.1, seed: Seed = 0,
                dtype=torch.float32, device="cpu"):
    """Gaussian N(0, std^2) weights, as in the paper's sticky-Markov model, reproducible by seed."""
    dtype = _validate.float_dtype("dtype", dtype)  # an integer dtype would truncate the weights to 0
    device = _validate.device("device", device)
    gen = torch.Generator().manual_seed(seed)
    shapes = {"W_Q": (d_k, d_x), "W_K": (d_k, d_x), "W_V": (d_v, d_x), "W_O": (n_classes, d_v)}
    return {name: (std * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype=dtype, device=device)
            for name, shape in shapes.items()}


def causal_mask(T, device="cpu"):
    """True where query i may look at key j (j <= i)."""
    T = _validate.integer("T", T, 0)
    return torch.ones(T, T, dtype=torch.bool, device=_validate.device("device", device)).tril()


@checked
def movable_pairs(T: Whole(1), device="cpu"):
    """The causal pairs (j <= i) whose attention can change: all but query 0's, whose single key
    gets alpha_00 = 1 whatever its score. True where a pair counts, (T, T)."""
    pairs = causal_mask(T, device).clone()
    pairs[0, 0] = False
    return pairs


@checked
def scores(q: Finite[Float[Tensor, "*B Tq d_k"]], k: Finite[Float[Tensor, "*B Tk d_k"]], causal: Flag = True,
           positions: NonNegative[Int[Tensor, " Tq"]] | None = None) -> Float[Tensor, "*B Tq Tk"]:
    """s_ij = q_i . k_j / sqrt(d_k), (..., T_q, T_k), -inf where the causal mask forbids j > i
    (``forward``'s convention). ``positions`` are the sequence positions of the rows of q (default
    0, 1, ...: every query), so that the scores of a few queries can be computed alone; a position past
    the last key sees every key.

    The one home of the scores for a single head: ``forward`` and the chapter experiments
    (``specialisation``, ``experiments.frame_rate``) use it. Three places keep their own line, for
    a reason: ``models.CausalSelfAttention`` splits several heads out of one packed ``nn.Linear``
    inside a layer's forward pass (no input checks on that hot path), ``monitor``'s reader must
    repeat ``nn.MultiheadAttention``'s own arithmetic to read its heads, and ``batched`` computes
    many models' scores in one fused einsum, block by block of keys."""
    if q.shape[-1] == 0:
        _fail("q", "d_k >= 1", f"shape {tuple(q.shape)}")
    return _scores(q, k, causal, None if positions is None else positions.to(q.device))


def _scores(q, k, causal=True, positions=None):
    """``scores`` without the checks (``forward`` has checked its inputs already)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if not causal:
        return s
    rows = torch.arange(q.shape[-2], device=q.device) if positions is None else positions
    future = torch.arange(k.shape[-2], device=q.device) > rows[:, None]
    return s.masked_fill(future, float("-inf"))


@checked
def forward(x: Float[Tensor, "*B T d_x"], params: Mapping[str, Tensor], causal: Flag = True) -> dict[str, Tensor]:
    """The head's forward pass, keeping every intermediate the gradients need.

    Returns a dict with q, k, v (..., T, d), s (..., T, T; -inf where masked),
    alpha (..., T, T; rows sum to 1), g (..., T, d_v) and logits (..., T, n_classes).
    """
    _check_inputs(x, params)
    return _forward(x, params, causal)


def _forward(x, params, causal=True):
    """``forward`` without the checks (``loss`` and ``gradients`` have checked their inputs already)."""
    q = x @ params["W_Q"].T
    k = x @ params["W_K"].T
    v = x @ params["W_V"].T
    s = _scores(q, k, causal)
    alpha = torch.softmax(s, dim=-1)
    g = alpha @ v
    logits = g @ params["W_O"].T
    return {"q": q, "k": k, "v": v, "s": s, "alpha": alpha, "g": g, "logits": logits}


@checked
def loss(x: Float[Tensor, "*B T d_x"], y: Int[Tensor, "*B T"], params: Mapping[str, Tensor], causal: Flag = True) -> Tensor:
    """Mean cross-entropy over every position (and batch element): the L of the paper."""
    _check_inputs(x, params, y)
    logits = _forward(x, params, causal)["logits"]
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long())


# ----------------------------------------------------------------------------- gradients

@checked
def error_signal(logits: Float[Tensor, "*B T C"], y: Int[Tensor, "*B T"], W_O: Float[Tensor, "C d_v"]):
    """u_i = dL/dg_i = W_O^T (softmax(z_i) - onehot(y_i)) / N, N = number of positions."""
    _validate.finite_values("logits", logits)
    _validate.labels("y", y, logits.shape[-1])
    n_positions = y.numel()
    dlogits = torch.softmax(logits, dim=-1)
    dlogits = dlogits - nn.functional.one_hot(y.long(), logits.shape[-1]).to(logits.dtype)
    dlogits = dlogits / n_positions
    return dlogits, dlogits @ W_O


@checked
def score_gradient(alpha: Float[Tensor, "*B Tk"], b: Float[Tensor, "*B Tk"]):
    """dL/ds_ij = alpha_ij (b_ij - E_{alpha_i}[b]), and the advantage A_ij = E_{alpha_i}[b] - b_ij.

    Where alpha_ij = 0 (behind a causal mask) the gradient is exactly 0: masked keys get none.
    """
    _validate.finite_values("alpha", _validate.distributions(
        "alpha", alpha, expected="attention weights: rows of a softmax over keys (not the scores)"))
    _validate.finite_values("b", b)
    expected_b = (alpha * b).sum(dim=-1, keepdim=True)
    advantage = expected_b - b
    return alpha * (b - expected_b), advantage


@checked
def gradients(x: Float[Tensor, "*B T d_x"], y: Int[Tensor, "*B T"], params: Mapping[str, Tensor],
              causal: Flag = True) -> dict[str, Tensor]:
    """Closed-form gradients of the mean cross-entropy, one dict entry per quantity.

    Keys: u, b, advantage (E_alpha[b] - b: positive where gradient descent raises the score),
    s (dL/ds), q, k, v, W_Q, W_K, W_V, W_O. Each has the shape of the tensor it belongs to
    (b, advantage and s are (..., T, T)).
    """
    _check_inputs(x, params, y)
    fw = _forward(x, params, causal)
    q, k, v, alpha, g = fw["q"], fw["k"], fw["v"], fw["alpha"], fw["g"]
    dlogits, u = error_signal(fw["logits"], y, params["W_O"])
    b = u @ v.transpose(-1, -2)
    ds, advantage = score_gradient(alpha, b)
    if causal:  # a masked key has no advantage to speak of: show 0 there, not a number it cannot use
        advantage = advantage.masked_fill(~causal_mask(x.shape[-2], x.device), 0.0)
    scale = 1.0 / math.sqrt(q.shape[-1])
    dq = ds @ k * scale
    dk = ds.transpose(-1, -2) @ q * scale
    dv = alpha.transpose(-1, -2) @ u

    def outer_sum(d_out, inp):  # sum over batch and positions of d_out_t x_t^T
        return torch.einsum("...to,...ti->oi", d_out, inp)

    return {
        "u": u, "b": b, "advantage": advantage, "s": ds,
        "q": dq, "k": dk, "v": dv,
        "W_Q": outer_sum(dq, x), "W_K": outer_sum(dk, x), "W_V": outer_sum(dv, x),
        "W_O": outer_sum(dlogits, g),
    }


# ----------------------------------------------------------------------------- the closed form as a training backward

def _loss_and_weight_gradients(x, y, W_Q, W_K, W_V, W_O, causal=True):
    """The mean cross-entropy and dL/dW for the four matrices, by the formulas above, nothing else.

    Unchecked (the caller checked its data once): the training loops call it at every step. It keeps
    no intermediate it does not need, so it runs about 1.3x faster than autograd on chapter 4's
    shapes (1024 sequences of 16 positions, an 8-wide head: tests/test_attention.py times both).
    """
    d_k, T, n = W_Q.shape[0], x.shape[-2], y.numel()
    scale = 1.0 / math.sqrt(d_k)
    qkv = x @ torch.cat([W_Q * scale, W_K, W_V]).T          # one GEMM for q (scaled), k and v
    q, k, v = qkv.split([d_k, d_k, W_V.shape[0]], dim=-1)
    s = q @ k.transpose(-1, -2)
    if causal:
        s.masked_fill_(torch.ones(T, T, dtype=torch.bool, device=x.device).triu_(1), float("-inf"))
    alpha = torch.softmax(s, dim=-1)
    g = alpha @ v
    z = g @ W_O.T
    z = z - z.amax(-1, keepdim=True)                        # (torch's log_softmax is 2x slower over 3 classes)
    e = z.exp()
    Z = e.sum(-1, keepdim=True)
    loss = (Z.log().sum() - z.gather(-1, y.unsqueeze(-1)).sum()) / n     # mean of -log softmax(z_i)[y_i]
    dz = e.div_(Z)                                          # softmax(z_i) - onehot(y_i), over N: dL/dz_i
    dz.scatter_add_(-1, y.unsqueeze(-1), torch.full_like(dz[..., :1], -1.0)).div_(n)
    u = dz @ W_O                                            # u_i = dL/dg_i
    ds = alpha * (u @ v.transpose(-1, -2) - (u * g).sum(-1, keepdim=True))   # alpha_ij (b_ij - E_alpha_i[b])
    d_qkv = torch.cat([ds @ k, ds.transpose(-1, -2) @ q, alpha.transpose(-1, -2) @ u], dim=-1)
    dW = d_qkv.reshape(-1, d_qkv.shape[-1]).T @ x.reshape(-1, x.shape[-1])   # sum_t (dL/d out_t) x_t^T
    dW_Q, dW_K, dW_V = dW.split([d_k, d_k, W_V.shape[0]])
    dW_O = dz.reshape(-1, dz.shape[-1]).T @ g.reshape(-1, g.shape[-1])
    return loss, (dW_Q * scale, dW_K, dW_V, dW_O)


class _ClosedFormLoss(torch.autograd.Function):
    """The loss, with the closed-form gradients as its backward: ``loss.backward()`` fills each
    matrix's ``.grad`` from the formulas instead of autograd's graph (inputs x, y get none)."""

    @staticmethod
    def forward(ctx, x, y, W_Q, W_K, W_V, W_O, causal):
        loss, grads = _loss_and_weight_gradients(x, y, W_Q, W_K, W_V, W_O, causal)
        ctx.save_for_backward(*grads)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        return (None, None, *(grad_loss * g for g in ctx.saved_tensors), None)


@checked
def closed_form_loss(x: Float[Tensor, "*B T d_x"], y: Int[Tensor, "*B T"], params: Mapping[str, Tensor],
                     causal: Flag = True, check: Flag = True) -> Tensor:
    """``loss``, whose backward pass is the closed form of ``gradients`` (the four matrices only).

    What the chapters' training loops call: the same value and gradients as ``loss`` with autograd
    (to float rounding), faster. ``check=False`` skips every check, the annotations' too, for a loop
    whose data was checked once before it started.
    """
    if check:
        _check_inputs(x, params, y)
    return _ClosedFormLoss.apply(x, y.long(), *(params[name] for name in PARAM_NAMES), causal)


# ----------------------------------------------------------------------------- score-space kernel

@checked
def _one_sequence(x: Float[Tensor, "T d_x"], q: Float[Tensor, "T d_k"], k: Float[Tensor, "T d_k"]):
    """x (T, d_x) and its queries and keys (T, d_k) of one sequence (no batch axis), finite, d_k >= 1."""
    if q.shape[1] == 0:
        _fail("q", "d_k >= 1", f"shape {tuple(q.shape)}")
    for name, t in (("x", x), ("q", q), ("k", k)):
        _validate.finite_values(name, t)


@checked
def score_kernel(x: Float[Tensor, "T d_x"], q: Float[Tensor, "T d_k"], k: Float[Tensor, "T d_k"]) -> Float[Tensor, "T T T T"]:
    """The score-space kernel of one sequence: how a step on W_Q, W_K moves every score.

        K[i', j', i, j] = [(x_i . x_i')(k_j . k_j') + (x_j . x_j')(q_i . q_i')] / d_k

    with s_ij = q_i . k_j / sqrt(d_k), q = x W_Q^T, k = x W_K^T. A gradient step of size lr on
    W_Q and W_K moves the scores, to first order, by Delta s = -lr K : dL/ds (sum over i, j).
    K = J J^T, J the Jacobian of the scores in (W_Q, W_K): reshaped to (T^2, T^2) it is PSD.
    Shape (T, T, T, T), for x (T, d_x) and q, k (T, d_k).
    """
    _one_sequence(x, q, k)
    xx = x @ x.T   # xx[i, i'] = x_i . x_i'
    qq = q @ q.T
    kk = k @ k.T
    # first term: the W_Q route (k_j fixed, q_i moves with x_i); second: the W_K route
    return (torch.einsum("ai,bj->abij", xx, kk) + torch.einsum("bj,ai->abij", xx, qq)) / q.shape[1]


@checked
def predicted_score_change(x: Float[Tensor, "T d_x"], q: Float[Tensor, "T d_k"], k: Float[Tensor, "T d_k"],
                           ds: Float[Tensor, "T T"], lr: Real()) -> Float[Tensor, "T T"]:
    """Delta s_{i'j'} = -lr sum_ij K[i', j', i, j] dL/ds_ij: the first-order score change of one step.

    ds is dL/ds of the sequence, (T, T) (0 where a causal mask forbids a pair; a head without the mask
    has a gradient there, so what ds holds is used as given); lr the step size,
    any finite number (the prediction is linear in it: a negative one predicts a step uphill).
    """
    _one_sequence(x, q, k)
    if ds.dtype != x.dtype:
        _fail("ds.dtype", f"{x.dtype} (the dtype of x)", ds.dtype)
    _validate.finite_values("ds", ds)   # 0, not nan, where the causal mask forbids a pair
    return -float(lr) * torch.einsum("abij,ij->ab", score_kernel(x, q, k), ds)


# ----------------------------------------------------------------------------- nn.Module

class AttentionHead(nn.Module):
    """The same head as an ``nn.Module``, so the training loop and optimisers can drive it.

    Its parameters are named W_Q, W_K, W_V, W_O, which is what the optimiser parameter groups
    of ``train.param_groups`` match on (routing = W_Q, W_K; content = the rest).
    """

    @checked
    def __init__(self, d_x, d_k, d_v, n_classes, std=0.1, seed=0, causal: Flag = True, dtype=torch.float32):
        super().__init__()
        self.causal = bool(causal)
        for name, W in init_params(d_x, d_k, d_v, n_classes, std, seed, dtype).items():
            self.register_parameter(name, nn.Parameter(W))

    def params(self):
        return {name: getattr(self, name) for name in PARAM_NAMES}

    def forward(self, x):
        return forward(x, self.params(), self.causal)["logits"]

    def internals(self, x):
        """Everything ``forward`` keeps (q, k, v, s, alpha, g, logits), without gradients."""
        with torch.no_grad():
            return forward(x, self.params(), self.causal)
