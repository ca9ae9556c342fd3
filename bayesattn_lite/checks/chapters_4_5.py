"""Checks of the exercises of chapters 4-5: the advantage flow of a set of keys, and the E-step of a
Gaussian mixture written as attention."""

import torch

from .. import attention, diagnostics, em
from ._engine import DTYPE, SIZES, Flaw, Output, Spec, generator, input_note, is_causal, make_case, peaked_attention, run


# ----------------------------------------------------------------------------- advantage flow (chapter 4)

def _flow(inp, weights=True, masked=True, axis=-1, sign=1):
    """The flow with one knob turned; ``masked`` True flags keys, False none, "queries" flags rows."""
    alpha, advantage, key_mask = inp["alpha"], inp["advantage"], inp["key_mask"]
    terms = alpha * advantage if weights else advantage
    if masked == "queries":
        terms = terms * key_mask.to(DTYPE)[:, None]
    elif masked:
        terms = terms * key_mask.to(DTYPE)[None, :]
    return sign * terms.sum(dim=axis)


_FLOW = Output(
    "flow", ("T",),
    "flow_i = sum over the keys j of the set of alpha_ij A_ij, i.e. (alpha * advantage * key_mask).sum(dim=-1)",
    _flow,
    [Flaw("sign", -1, "wrong sign: the flow is -dL/dc, the rate at which the loss falls when every score of the "
                      "set rises by c; it is positive when gradient descent raises the set's scores together "
                      "(a positive advantage raises a score)."),
     Flaw("weights", False, "the attention weights are missing: you summed A_ij alone. Raising a score by c "
                            "changes the loss through that score's gradient dL/ds_ij, and a score acts only through "
                            "its attention weight (chapter 2's advantage law): each term needs that factor."),
     Flaw("masked", False, "you summed over every key the query sees, not over the set: that sum "
                           "is exactly 0 for every query of a real advantage map (the advantages of a row average "
                           "to zero under alpha: raising all scores of a row together changes nothing). "
                           "Multiply by key_mask before summing."),
     Flaw("masked", "queries", "the mask is on the wrong axis: you multiplied the rows (the queries) by key_mask, "
                               "so each query is kept or dropped whole and a kept row is still summed over every "
                               "key it sees, which is 0 for a real advantage map. key_mask flags keys: it has to "
                               "line up with the last axis of the (T, T) terms (the columns), the same flags in "
                               "every row. Check which axis a (T,) tensor broadcasts along, and where [:, None] "
                               "puts it."),
     Flaw("axis", 0, "summed over the wrong axis: you added up a column (the queries i that look at a key). "
                     "The flow of query i sums its own row over the keys of the set: .sum(dim=-1).")],
    shape_hints={("T", "T"): "One number per query: sum the (T, T) terms over the keys (dim=-1)."},
    hint="a score changes the loss only through its attention weight; keep the keys of the set (the columns), "
         "in every row; one number per query.",
)


def _advantage_flow_spec():
    signature = {"alpha": ("T", "T"), "advantage": ("T", "T"), "key_mask": ("T",)}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = generator(1100 + n)
        alpha = peaked_attention(T, n, gen)
        _, advantage = attention.score_gradient(alpha, torch.randn(T, T, generator=gen, dtype=DTYPE))
        advantage = advantage.masked_fill(alpha == 0, 0.0)
        key_mask = torch.rand(T, generator=gen) < 0.4
        key_mask[n % T] = True  # never an empty set
        if n == len(SIZES) - 1:
            # one map measured against another baseline (each query's row shifted by its own constant), so
            # that it does not average to zero under alpha: without it, a mask on the query axis and no mask
            # at all would both return zeros, and the check could not tell the two mistakes apart
            shift = torch.randn(T, 1, generator=gen, dtype=DTYPE)
            advantage = advantage + shift * (alpha > 0).to(DTYPE)
        inputs = {"alpha": alpha, "advantage": advantage, "key_mask": key_mask}
        expected = diagnostics.advantage_flow(alpha, advantage, key_mask)
        cases.append(make_case(signature, inputs, [expected], input_note(T, is_causal(n))))
    return Spec("advantage_flow", signature, [_FLOW], cases,
                "alpha and advantage are (T, T), queries on the rows; key_mask is (T,), one flag per key.")


def check_advantage_flow(fn):
    """Check ``fn(alpha, advantage, key_mask) -> flow`` (T,): sum over the keys j with key_mask_j of
    alpha_ij A_ij, the advantage law summed over a set of keys (``diagnostics.advantage_flow``)."""
    return run(_advantage_flow_spec(), fn)


# ----------------------------------------------------------------------------- responsibilities as attention (chapter 5)

def _resp_attention(inp, bias="both", scale="variance", axis=1):
    x, means, variance, weights = inp["x"], inp["means"], inp["variance"], inp["weights"]
    temperature = variance if scale == "variance" else variance.sqrt()
    logits = x @ means.T / temperature
    if bias in ("both", "norm"):
        logits = logits - (means ** 2).sum(1) / (2 * temperature)
    if bias in ("both", "prior"):
        logits = logits + torch.log(weights)
    return torch.softmax(logits, dim=axis)


_RESP_ATTENTION = Output(
    "resp", ("n", "K"),
    "resp_ik = softmax_k(q_i . kappa_k + beta_k), q_i = x_i / sigma, kappa_k = mu_k / sigma, "
    "beta_k = log pi_k - ||mu_k||^2 / (2 sigma^2)",
    _resp_attention,
    [Flaw("bias", "none", "the bias beta_k is missing: softmax(x_i . mu_k / sigma^2) alone. Expanding "
                          "-||x_i - mu_k||^2 / (2 sigma^2) leaves -||mu_k||^2 / (2 sigma^2), which differs between "
                          "components, and the prior adds log pi_k: beta_k = log pi_k - ||mu_k||^2 / (2 sigma^2)."),
     Flaw("bias", "prior", "the term -||mu_k||^2 / (2 sigma^2) is missing from the bias. Only ||x_i||^2 cancels in "
                           "the normalisation (it is the same for every k); ||mu_k||^2 differs between components."),
     Flaw("bias", "norm", "log pi_k is missing from the bias: the E-step weighs each Gaussian by its mixing weight, "
                          "pi_k N(x_i; mu_k, sigma^2 I), and in the logits that is + log pi_k."),
     Flaw("scale", "sigma", "divided by sigma where the formula has sigma^2: q_i . kappa_k = (x_i / sigma) . "
                            "(mu_k / sigma) = x_i . mu_k / sigma^2, and the same sigma^2 divides ||mu_k||^2 / 2. "
                            "`variance` is sigma^2 already."),
     Flaw("axis", 0, "softmax over the wrong axis: each point's responsibilities are a distribution over the "
                     "K components (dim=1), as each query's attention is a distribution over its keys.")],
    transpose_hint="Transposed: one row per point (a query), one column per component (a key).",
)


def _responsibilities_spec():
    signature = {"x": ("n", "d"), "means": ("K", "d"), "variance": (), "weights": ("K",)}
    cases = []
    for n, (n_points, d, K) in enumerate([(7, 3, 2), (9, 4, 5), (6, 5, 3), (11, 2, 4)]):
        gen = generator(1200 + n)
        means = torch.randn(K, d, generator=gen, dtype=DTYPE) * torch.linspace(0.5, 2.0, K, dtype=DTYPE)[:, None]
        inputs = {"x": 1.5 * torch.randn(n_points, d, generator=gen, dtype=DTYPE), "means": means,
                  "variance": torch.tensor(0.4 + 0.5 * n, dtype=DTYPE),
                  "weights": torch.softmax(torch.randn(K, generator=gen, dtype=DTYPE), 0)}
        expected = em.e_step(inputs["x"], means, float(inputs["variance"]), inputs["weights"])[0]
        cases.append(make_case(signature, inputs, [expected], f"n={n_points}, K={K}"))
    return Spec("responsibilities_as_attention", signature, [_RESP_ATTENTION], cases,
                "x is (n, d) and means (K, d): x @ means.T gives the (n, K) dot products.")


def check_responsibilities_as_attention(fn):
    """Check ``fn(x, means, variance, weights) -> resp`` (n, K): the E-step of a spherical Gaussian
    mixture written as attention, softmax_k(x_i . mu_k / sigma^2 - ||mu_k||^2 / (2 sigma^2) + log pi_k)."""
    return run(_responsibilities_spec(), fn)
