"""Checks of the problem sets' questions (book/assignments, ``bayesattn_lite.instructor.assignments``):
set 1, a head with a temperature and an ALiBi bias, and the directions one step moves W_V in; set 2,
the second-order attention change and the tempered score kernel; set 3, a reproducible experiment with
several seeds, and the floors of a sticky chain. Each takes the learner's object, never raises, and says
what is wrong in words."""

import dataclasses
import functools
import math
import numbers

import numpy as np
import torch

from .. import attention
from . import _engine
from ._engine import (DTYPE, SIZES, CheckResult, Flaw, Output, Spec, generator, input_note, is_causal, make_case,
                      not_callable, peaked_attention, rng, run, type_name, without_answer)


# ----------------------------------------------------------------------------- forms of a question
#
# A question with several forms can be handed out to a class in another form than the published one
# (instructor/variants.py, a class variant), so that the published solutions do not answer it. A form is
# the reference's knobs that make the right answer in it; every mistake is named relative to it.

def _form(forms, form):
    if form not in forms:
        raise ValueError(f"form: expected one of {list(forms)}, got {form!r}")
    return forms[form]


# ----------------------------------------------------------------------------- problem set 1: temperature and ALiBi

BIASED_FORMS = {  # the published head first
    "causal": {},                                                # s = q.k / (tau sqrt(d_k)) - m (i - j), j <= i
    "bidirectional": {"causal": False, "distance": "absolute"},  # an encoder's ALiBi: - m |i - j| over every j
    "mup": {"dk_power": 2.0},                                    # muP's scale: q.k / (tau d_k)
}
_BIASED_SCORE = {"causal": "q_i . k_j / (tau sqrt(d_k)) - m (i - j) over j <= i",
                 "bidirectional": "q_i . k_j / (tau sqrt(d_k)) - m |i - j| over every j",
                 "mup": "q_i . k_j / (tau d_k) - m (i - j) over j <= i"}


def _biased_alpha(inp, tau_in_softmax=True, bias_sign=1, bias=True, causal=True, sqrt=True, dk_power=1.0,
                  distance="signed"):
    """alpha_ij = softmax_j(q_i . k_j / (tau d_k^(dk_power/2)) - m (i - j)) over j <= i (an ALiBi head);
    distance="absolute" penalises |i - j|, causal=False lets every query see every key."""
    q, k, tau, slope = inp["q"], inp["k"], inp["tau"], inp["slope"]
    T, d_k = q.shape
    scale = (tau if tau_in_softmax else 1.0) * (d_k ** (dk_power / 2) if sqrt else 1.0)
    offset = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).to(q.dtype)  # i - j
    s = q @ k.T / scale - (bias_sign * slope * (offset.abs() if distance == "absolute" else offset) if bias else 0.0)
    if causal:
        s = s.masked_fill(~attention.causal_mask(T), float("-inf"))
    return torch.softmax(s, dim=-1)


def _biased_qk(inp, which, sign=1, tau_in_softmax=True, tau_in_chain=True, bias_sign=1, bias=True, causal=True,
               sqrt=True, dk_power=1.0, distance="signed"):
    alpha = _biased_alpha(inp, tau_in_softmax, bias_sign, bias, causal, sqrt, dk_power, distance)
    b = inp["u"] @ inp["v"].T  # b_ij = u_i . v_j
    ds = alpha * (b - (alpha * b).sum(-1, keepdim=True))  # dL/ds: the advantage law, bias or not
    q, k = inp["q"], inp["k"]
    scale = (inp["tau"] if tau_in_chain else 1.0) * (q.shape[1] ** (dk_power / 2) if sqrt else 1.0)
    return sign * (ds @ k if which == "q" else ds.T @ q) / scale


def _biased_scale(truth):
    """The score's divisor in words: tau d_k under muP's scaling, tau sqrt(d_k) otherwise."""
    return "tau d_k" if truth.get("dk_power") == 2.0 else "tau sqrt(d_k)"


def _biased_flaws(form="causal"):
    truth = BIASED_FORMS[form]
    score = _BIASED_SCORE[form]
    scale = _biased_scale(truth)
    penalty = "m |i - j|" if truth.get("distance") == "absolute" else "m (i - j) with i - j >= 0"
    flaws = [
        Flaw("sign", -1, "wrong sign: dL/ds_ij = alpha_ij (b_ij - E_alpha_i[b]) with b_ij = u_i . v_j "
                         "(the advantage law with A = E[b] - b: dL/ds = -alpha A)."),
        Flaw("tau_in_softmax", False, f"the temperature is missing from the attention weights: alpha is the "
                                      f"softmax of {score}, with the 1/tau."),
        Flaw("tau_in_chain", False, f"the chain rule through the score lost its 1/tau: ds_ij/dq_i = "
                                    f"k_j / ({scale}), so dq = dL/ds @ k / ({scale}). "
                                    "The temperature is in alpha *and* in the derivative of the score."),
        Flaw("bias_sign", -1, f"the ALiBi bias has the wrong sign: it *penalises* distance, "
                              f"s_ij = ... - {penalty}, so far keys get less attention."),
        Flaw("bias", False, "the positional bias is missing from alpha. The bias does not depend on q or k, "
                            "so it has no derivative of its own, but it changes alpha, hence every gradient."),
        Flaw("sqrt", False, f"the 1/{scale.removeprefix('tau ')} is missing (in alpha and in the chain rule)."),
    ]
    if truth.get("causal", True):
        flaws.append(Flaw("causal", False, "no causal mask: query i attends only to keys j <= i (ALiBi heads are "
                                           "causal). Set the scores above the diagonal to -inf before the softmax."))
    else:
        flaws += [Flaw("causal", True, "a causal mask: this head is bidirectional (an encoder's), every query "
                                       "attends to every key, before and after it, with the penalty - m |i - j|."),
                  Flaw("distance", "signed", "the bias uses i - j, not the distance |i - j|: a key after the "
                                             "query (j > i) gets a bonus instead of a penalty.")]
    if truth.get("dk_power") == 2.0:
        flaws.append(Flaw("dk_power", 1.0, "the scores are scaled as in the usual head, not as in this one (read "
                                           "its definition again). It uses muP's scaling and divides by d_k: "
                                           "s = q.k / (tau d_k), in alpha and in the chain rule."))
    return flaws


def _biased_spec(form="causal"):
    truth = _form(BIASED_FORMS, form)
    scale = _biased_scale(truth)
    flaws = _biased_flaws(form)
    outputs = [
        Output("dq", ("T", "d_k"), f"dq = dL/ds @ k / ({scale}), dL/ds = alpha (b - E_alpha[b]), "
               f"alpha = softmax of s_ij = {_BIASED_SCORE[form]}",
               lambda inp, **kn: _biased_qk(inp, "q", **{**truth, **kn}), flaws),
        Output("dk", ("T", "d_k"), f"dk = (dL/ds)^T @ q / ({scale}) (the transpose: key j collects "
               "from every query i)", lambda inp, **kn: _biased_qk(inp, "k", **{**truth, **kn}), flaws)]
    signature = {"q": ("T", "d_k"), "k": ("T", "d_k"), "v": ("T", "d_v"), "u": ("T", "d_v"), "tau": (),
                 "slope": ()}
    taus, slopes = (0.5, 2.0, 1.5, 3.0, 0.7), (0.25, 0.5, 1.0, 0.125, 0.75)
    cases = []
    for n, (T, _d_x, d_k, d_v, _c) in enumerate(SIZES):
        gen = generator(1500 + n)
        inputs = {"q": 1.5 * torch.randn(T, d_k, generator=gen, dtype=DTYPE),
                  "k": 1.5 * torch.randn(T, d_k, generator=gen, dtype=DTYPE),
                  "v": torch.randn(T, d_v, generator=gen, dtype=DTYPE),
                  "u": torch.randn(T, d_v, generator=gen, dtype=DTYPE),
                  "tau": torch.tensor(taus[n], dtype=DTYPE), "slope": torch.tensor(slopes[n], dtype=DTYPE)}
        expected = [out.compute(inputs) for out in outputs]
        cases.append(make_case(signature, inputs, expected, f"T={T}, tau={taus[n]}, m={slopes[n]}"))
    return Spec("biased_qk_gradients", signature, outputs, cases,
                "q, k are (T, d_k), v, u (T, d_v); tau and slope are numbers (0-d tensors).")


def _names_the_mistake(check):
    """A problem set's check as the student's notebook shows it: a wrong answer's mistake named, never the
    reference formula, since the problem sets are graded. The full words stay in ``practice``, for the
    grader's practice-mode feedback."""
    @functools.wraps(check)
    def named(*args, **kwargs):
        result = check(*args, **kwargs)
        if result.passed:
            return result
        shown = result.graded or without_answer(result.message)
        return dataclasses.replace(result, message=shown, graded=shown, practice=result.message)
    return named


@_names_the_mistake
def check_biased_qk_gradients(fn, form="causal"):
    """Check ``fn(q, k, v, u, tau, slope) -> (dq, dk)`` for a head with a temperature and an ALiBi bias and
    the error signal u = dL/dg: the published form is causal, s_ij = q_i . k_j / (tau sqrt(d_k)) - slope (i - j);
    a class variant's ``form`` is one of ``BIASED_FORMS`` (bidirectional: - slope |i - j| over every j;
    mup: q_i . k_j / (tau d_k))."""
    return run(_biased_spec(form), fn)


# ----------------------------------------------------------------------------- problem set 1: rank of dW_V

def _value_basis(W_O):
    """An orthonormal basis (d_v, C - 1) of {W_O^T r : sum_c r_c = 0}, where every column of dW_V lives,
    and the usual wrong one: the top C - 1 singular directions of W_O^T (no centring)."""
    C = W_O.shape[0]
    right = torch.linalg.svd(W_O.T @ (torch.eye(C, dtype=W_O.dtype) - 1.0 / C), full_matrices=False)[0]
    top = torch.linalg.svd(W_O.T, full_matrices=False)[0]
    return right[:, : C - 1], top[:, : C - 1]


def _value_basis_cases():
    cases = []
    for n, (C, d_v) in enumerate([(2, 5), (3, 6), (4, 7), (5, 9), (3, 4)]):
        gen = generator(1600 + n)
        cases.append(torch.randn(C, d_v, generator=gen, dtype=DTYPE))
    return cases


def _value_gradient_columns(W_O, seed):
    """dW_V of a random head with this W_O (stored (C, d_v)): its columns must lie in the subspace."""
    C, d_v = W_O.shape
    gen = generator(seed)
    T, d_x, d_k = 6, 3, 2
    params = attention.init_params(d_x, d_k, d_v, C, std=0.7, seed=seed, dtype=DTYPE)
    params["W_O"] = W_O
    x = torch.randn(T, d_x, generator=gen, dtype=DTYPE)
    y = torch.randint(0, C, (T,), generator=gen)
    return attention.gradients(x, y, params)["W_V"]


@_names_the_mistake
def check_value_update_basis(fn):
    """Check ``fn(W_O) -> B``: an orthonormal basis (d_v, C - 1), as columns, of the subspace that holds every
    column of dW_V after one step (W_O stored (C, d_v)). Which subspace that is, the question asks: a graded
    check's docstring, which ``help()`` shows the student, states the contract, never the answer."""
    name = "value_update_basis"
    if (verdict := not_callable(name, ["W_O"], fn)) is not None:
        return verdict
    for n, W_O in enumerate(_value_basis_cases()):
        C, d_v = W_O.shape
        where = f"(input {n + 1}: W_O of shape ({C}, {d_v}) = (C, d_v))"
        try:
            got = fn(W_O.clone())
        except _engine.LEARNER_ERRORS as exc:  # a verdict, never a traceback
            shapes = any(w in str(exc).lower() for w in ("shape", "size", "dimension", "mat1", "index"))
            return CheckResult(name, False, f"your function raised {type(exc).__name__}: {str(exc)[:200]} {where}."
                               + (" W_O is stored (C, d_v) as nn.Linear stores it; return (d_v, C - 1)." if shapes
                                  else ""))   # the layout hint only where the error is about shapes, not a typo
        if isinstance(got, np.ndarray) and got.dtype.kind in "biuf":
            got = torch.from_numpy(got)
        if not isinstance(got, torch.Tensor):
            return CheckResult(name, False, f"expected a tensor of shape ({d_v}, {C - 1}) = (d_v, C - 1), got "
                               f"{type_name(got)} {where}.")
        got = got.detach().to(DTYPE).cpu()
        shape = tuple(got.shape)
        if shape == (d_v, C):
            return CheckResult(name, False, graded=f"you returned {C} = C directions {where}; the subspace has "
                               f"dimension C - 1 = {C - 1}.", message=(
                f"you returned {C} = C directions {where}; the subspace has dimension C - 1 = {C - 1}. The rows of "
                "softmax(z) - onehot(y) sum to 0 (both are distributions), so a step never moves W_V along "
                "W_O^T 1 (the sum of W_O's rows): keep only the image of the zero-sum vectors, "
                "W_O^T (I - 11^T/C)."))
        if shape == (C - 1, d_v):
            return CheckResult(name, False, f"expected the basis vectors as *columns*, shape ({d_v}, {C - 1}) = "
                               f"(d_v, C - 1), got the transpose {shape} {where}.")
        if shape != (d_v, C - 1):
            hint = (" The directions live in value space (length d_v): W_O^T r, not W_O r."
                    if shape and shape[0] == C else "")
            return CheckResult(name, False, f"expected shape ({d_v}, {C - 1}) = (d_v, C - 1), got {shape} "
                               f"{where}.{hint}")
        if not torch.isfinite(got).all():
            return CheckResult(name, False, f"the basis contains nan or inf {where}.")
        gram = got.T @ got
        if not torch.allclose(gram, torch.eye(C - 1, dtype=DTYPE), atol=1e-6):
            return CheckResult(name, False, (
                f"the columns are not orthonormal {where}: B^T B differs from the identity by up to "
                f"{float((gram - torch.eye(C - 1, dtype=DTYPE)).abs().max()):.3g}. Orthonormalise the spanning "
                "vectors (torch.linalg.qr, or the left singular vectors of torch.linalg.svd)."))
        right, top = _value_basis(W_O)
        projector = right @ right.T
        if not torch.allclose(got @ got.T, projector, atol=1e-6):
            if torch.allclose(got @ got.T, top @ top.T, atol=1e-6) and C > 1:
                return CheckResult(name, False, graded=f"your columns span the top C - 1 singular directions of "
                                   f"W_O^T {where}, not the directions one step can reach.", message=(
                    f"your columns span the top C - 1 singular directions of W_O^T {where}, not the image of the "
                    "zero-sum vectors: the step reaches W_O^T r only for r with sum_c r_c = 0, so centre first "
                    "(W_O^T (I - 11^T/C)) and then orthonormalise."))
            dW_V = _value_gradient_columns(W_O, seed=1700 + n)
            outside = dW_V - got @ (got.T @ dW_V)
            return CheckResult(name, False, graded=f"wrong subspace {where}: on a random head with this W_O, dW_V "
                               "has columns with a part outside your subspace.", message=(
                f"wrong subspace {where}: on a random head with this W_O, dW_V has columns with a part outside "
                f"your subspace (norm {float(outside.norm()):.3g} of {float(dW_V.norm()):.3g}). Every column of "
                "dW_V = dv^T x is a combination of the u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T."))
    return CheckResult(name, True, "spans exactly the directions one step can move W_V in, on 5 random W_O.")


# ----------------------------------------------------------------------------- problem set 2: second order

def _second_order(inp, sign=1, half=True, centre=True, variance=True, total=False):
    """1/2 alpha_ij [(c_ij)^2 - Var_alpha_i(delta)], c_ij = delta_ij - E_alpha_i[delta]: the O(delta^2) term."""
    alpha, delta = inp["alpha"], inp["delta_s"]
    delta = delta.masked_fill(alpha == 0, 0.0)
    mean = (alpha * delta).sum(-1, keepdim=True)
    c = delta - mean if centre else delta
    square = c ** 2
    term = alpha * (square - (alpha * square).sum(-1, keepdim=True) if variance else square)
    term = sign * (0.5 if half else 1.0) * term
    return term + alpha * (delta - mean) if total else term


_SECOND = Output(
    "second_order", ("T", "T"),
    "1/2 alpha_ij [c_ij^2 - sum_k alpha_ik c_ik^2] with c_ij = delta_ij - sum_k alpha_ik delta_ik",
    _second_order,
    [Flaw("sign", -1, "wrong sign: the second-order term of softmax(s + delta) is +1/2 alpha (c^2 - Var)."),
     Flaw("half", False, "the 1/2 is missing: the Taylor expansion exp(delta) = 1 + delta + delta^2/2 + ... has it."),
     Flaw("centre", False, "the square is not centred: the expansion of exp(delta_j) / sum_k alpha_k exp(delta_k) "
                           "gives (delta_ij - E_alpha[delta])^2, not delta_ij^2 (the denominator contributes "
                           "E[delta]^2 and the cross term)."),
     Flaw("variance", False, "your rows do not sum to 0: subtract alpha_ij Var_alpha_i(delta) = alpha_ij sum_k "
                             "alpha_ik c_ik^2. Every row of softmax sums to 1 at every order, so each order's "
                             "term sums to 0."),
     Flaw("total", True, "you returned the first- plus the second-order change: return only the delta^2 term "
                         "(the first-order part alpha_ij c_ij is the advantage law's prediction).")],
    transpose_hint="Transposed: queries are the rows. Keep alpha's layout.",
)


def _second_order_spec():
    signature = {"alpha": ("T", "T"), "delta_s": ("T", "T")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = generator(1800 + n)
        alpha = peaked_attention(T, n, gen)
        delta = torch.randn(T, T, generator=gen, dtype=DTYPE).masked_fill(alpha == 0, 0.0)
        inputs = {"alpha": alpha, "delta_s": delta}
        cases.append(make_case(signature, inputs, [_second_order(inputs)], input_note(T, is_causal(n))))
    return Spec("second_order_attention_change", signature, [_SECOND], cases,
                "alpha and delta_s are (T, T), queries on the rows.")


@_names_the_mistake
def check_second_order_attention_change(fn):
    """Check ``fn(alpha, delta_s) -> (T, T)``: the second-order term of softmax(s + delta_s) - softmax(s),
    row by row, which the question asks you to derive."""
    return run(_second_order_spec(), fn)


# ----------------------------------------------------------------------------- problem set 2: tempered score kernel

TEMPERED_FORMS = {  # the published head first
    "both": {},                  # a step on W_Q and W_K, s = q.k / (tau sqrt(d_k))
    "frozen_keys": {"route": "Q"},  # W_K frozen: the step moves W_Q only
    "mup": {"dk_power": 2.0},    # muP's scale: s = q.k / (tau d_k)
}


def _tempered_change(inp, sign=1, tau_power=2, dk_power=1.0, route="both", exact=False):
    """First-order Delta s of one step of size eta on W_Q and W_K (route: on one of them), s = q . k /
    (tau d_k^(dk_power/2))."""
    x, W_Q, W_K, ds, eta, tau = (inp[n] for n in ("x", "W_Q", "W_K", "ds", "eta", "tau"))
    q, k = x @ W_Q.T, x @ W_K.T
    d_k = q.shape[1]
    # the score's 1/(tau sqrt(d_k)) appears twice: in dL/dW and in how the new weights move s
    chain = tau ** (tau_power / 2) * d_k ** (dk_power / 2)
    dW_Q = (ds @ k).T @ x / chain   # dL/dW_Q = dq^T x, dq = dL/ds @ k / (tau sqrt(d_k))
    dW_K = (ds.T @ q).T @ x / chain
    dq = -sign * eta * x @ dW_Q.T if route in ("both", "Q") else torch.zeros_like(q)
    dk = -sign * eta * x @ dW_K.T if route in ("both", "K") else torch.zeros_like(k)
    change = dq @ k.T + q @ dk.T + (dq @ dk.T if exact else 0.0)
    return change / chain


def _tempered_flaws(form="both"):
    truth = TEMPERED_FORMS[form]
    score = "q.k / (tau d_k)" if truth.get("dk_power") == 2.0 else "q.k / (tau sqrt(d_k))"
    flaws = [
        Flaw("sign", -1, "wrong sign: a gradient *descent* step, W <- W - eta dL/dW."),
        Flaw("tau_power", 1, "the temperature appears once; it appears twice: once in dL/dW_Q (the chain rule "
                             "through s) and once when the moved weights move s, so the kernel scales as 1/tau^2."),
        Flaw("tau_power", 0, f"the temperature is missing: s = {score} puts 1/tau in dL/dW and "
                             "again in Delta s, a factor 1/tau^2 in all."),
        Flaw("exact", True, "you computed the exact change of the scores, second-order term included: "
                            "Delta q . Delta k is of order eta^2; return the first-order (linear in eta) change only.")]
    if truth.get("dk_power") == 2.0:
        flaws.append(Flaw("dk_power", 1.0, "the kernel has the usual head's 1/d_k; this head divides its "
                                           "score by d_k (muP's scaling), and like the temperature that 1/d_k "
                                           "appears twice (in dL/dW and in Delta s): 1/d_k^2."))
    else:
        flaws.append(Flaw("dk_power", 0.5, "the 1/sqrt(d_k) appears once; like the temperature it appears twice "
                                           "(in dL/dW and in Delta s), so the kernel has 1/d_k."))
    if truth.get("route") == "Q":
        flaws += [Flaw("route", "both", "W_K moved too, but it is frozen in this head: the step moves W_Q "
                                        "only, so only the W_Q route (x_i.x_i')(k_j.k_j') counts."),
                  Flaw("route", "K", "you moved W_K, which is frozen in this head: the step moves W_Q only, "
                                     "the route (x_i.x_i')(k_j.k_j').")]
    else:
        flaws += [Flaw("route", "Q", "only the W_Q route: the step moves W_K too, adding (x_j.x_j')(q_i.q_i') / d_k."),
                  Flaw("route", "K", "only the W_K route: the step moves W_Q too, adding (x_i.x_i')(k_j.k_j') / d_k.")]
    return flaws


def _tempered_formula(form):
    truth = TEMPERED_FORMS[form]
    d_k = "d_k^2" if truth.get("dk_power") == 2.0 else "d_k"
    routes = ("(x_i.x_i')(k_j.k_j')" if truth.get("route") == "Q"
              else "[(x_i.x_i')(k_j.k_j') + (x_j.x_j')(q_i.q_i')]")
    return f"Delta s_{{i'j'}} = -eta / tau^2 sum_ij K[i', j', i, j] dL/ds_ij, K = {routes} / {d_k}"


def _tempered_spec(form="both"):
    truth = _form(TEMPERED_FORMS, form)
    output = Output("delta_s", ("T", "T"), _tempered_formula(form),
                    lambda inp, **kn: _tempered_change(inp, **{**truth, **kn}), _tempered_flaws(form))
    signature = {"x": ("T", "d_x"), "W_Q": ("d_k", "d_x"), "W_K": ("d_k", "d_x"), "ds": ("T", "T"), "eta": (),
                 "tau": ()}
    taus = (0.5, 2.0, 1.5, 3.0, 0.7)
    cases = []
    for n, (T, d_x, d_k, _d_v, _c) in enumerate(SIZES):
        gen = generator(1900 + n)
        alpha = torch.softmax((2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)).masked_fill(
            ~attention.causal_mask(T), float("-inf")), dim=-1)
        ds, _ = attention.score_gradient(alpha, torch.randn(T, T, generator=gen, dtype=DTYPE))
        inputs = {"x": torch.randn(T, d_x, generator=gen, dtype=DTYPE),
                  "W_Q": torch.randn(d_k, d_x, generator=gen, dtype=DTYPE),
                  "W_K": torch.randn(d_k, d_x, generator=gen, dtype=DTYPE),
                  "ds": ds, "eta": torch.tensor(0.3 + 0.2 * n, dtype=DTYPE), "tau": torch.tensor(taus[n], dtype=DTYPE)}
        cases.append(make_case(signature, inputs, [output.compute(inputs)], f"T={T}, tau={taus[n]}"))
    return Spec("tempered_score_change", signature, [output], cases,
                "x is (T, d_x), W_Q and W_K (d_k, d_x) as nn.Linear stores them, ds (T, T); eta, tau numbers.")


@_names_the_mistake
def check_tempered_score_change(fn, form="both"):
    """Check ``fn(x, W_Q, W_K, ds, eta, tau) -> (T, T)``: the first-order change of the scores
    s = q . k / (tau sqrt(d_k)) after one gradient step of size eta on W_Q and W_K (ds = dL/ds); a class
    variant's ``form`` is one of ``TEMPERED_FORMS`` (frozen_keys: the step moves W_Q only; mup: s = q . k /
    (tau d_k))."""
    return run(_tempered_spec(form), fn)


# ----------------------------------------------------------------------------- problem set 3: an experiment of your own
#
# check_reproducible and check_seeds certify that ``run_condition`` runs an experiment: the check calls it
# itself, on two entries of ``results`` (it must give their numbers again) and on one condition of
# ``results`` for integer seeds of its own that ``results`` does not have, drawn with the inputs' seed
# offset (the grader's per-submission offset, replayed by a regrade): the first of them twice (the same
# number both times), and the numbers must change with the seed. A constant, a table read back with a
# default for unknown seeds, a table keyed by strings (whose seeds no integer seed can be compared with):
# none is an experiment, and the seeds of ``results`` must be integers.
# The experiment is the learner's own design (task, models, budget, measure), so the package has no
# reference run to compare its numbers with: the reference is the learner's own ``results``, rerun. A run
# trains a model (seconds each, and the grader calls it in the learner's kernel), so the draws are few:
_RERUNS = 2      # entries of `results` run again
_FRESH = 2       # seeds `results` lacks, for one condition (the first one run twice)
_MORE = 2        # further fresh seeds, drawn only when the first ones all gave the same number


def _number(value):
    """``value`` as a float when it is one number (an int, a float, a numpy scalar, a tensor or array of
    one element), else None: a string of digits is not a measurement."""
    if value is None or isinstance(value, (str, bytes, bool, np.bool_)):
        return None
    if isinstance(value, torch.Tensor) and (value.numel() != 1 or value.dtype == torch.bool):
        return None
    if isinstance(value, np.ndarray) and (value.size != 1 or value.dtype.kind not in "iuf"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None


def _results_problem(results):
    """None when ``results`` is {condition: {integer seed: finite number}} with >= 2 conditions, else why not."""
    if not isinstance(results, dict) or len(results) < 2:
        return ("expected `results` to be a dict {condition: {seed: number}} with at least two conditions "
                f"to compare, got {type(results).__name__} of length {len(results) if hasattr(results, '__len__') else '?'}.")
    for condition, by_seed in results.items():
        if not isinstance(by_seed, dict) or not by_seed:
            return f"results[{_shown(condition)}]: expected a non-empty dict {{seed: number}}, got {type(by_seed).__name__}."
        for seed, value in by_seed.items():
            if not isinstance(seed, numbers.Integral) or isinstance(seed, (bool, np.bool_)):
                what = "a string" if isinstance(seed, str) else f"a {type(seed).__name__}"
                return (f"results[{_shown(condition)}] has the seed {_shown(seed)}, {what}: a seed is an integer (0, 1, 2, ...). "
                        "Hint: the grader calls run_condition with integer seeds of its own, as "
                        "train.seed_everything(seed) and torch.manual_seed(seed) take them; use integer seeds in "
                        "`results` too.")
            number = _number(value)
            if number is None:
                return f"results[{_shown(condition)}][{_shown(seed)}]: expected a number, got {type(value).__name__}."
            if not math.isfinite(number):
                return f"results[{_shown(condition)}][{_shown(seed)}] is {number}: a run diverged or a metric is undefined."
    return None


def _same(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _call(run_condition, condition, seed):
    """(the number ``run_condition(condition, seed)`` returns, None), or (None, why there is none)."""
    where = f"run_condition({_shown(condition)}, {_shown(seed)})"
    try:
        got = run_condition(condition, seed)
    except _engine.LEARNER_ERRORS as exc:  # a verdict, never a traceback
        return None, f"{where} raised {type(exc).__name__}: {str(exc)[:200]}"
    value = _number(got)
    if value is None:
        return None, f"{where} returned {type_name(got)}: expected one number, your measure."
    if not math.isfinite(value):
        return None, f"{where} gave {value}: a run diverged or a metric is undefined."
    return value, None


@dataclasses.dataclass(frozen=True)
class _Experiment:
    """What running ``run_condition`` showed: why it is no experiment (both questions fail), why it does not
    reproduce ``results`` (the reproducibility question fails), or neither, and what was run."""

    fake: str = ""
    problem: str = ""
    mistakes: tuple = ()
    summary: str = ""


def _draws(results):
    """The entries of ``results`` to rerun, the condition to run for fresh seeds, and those seeds (ints that
    ``results`` does not have), all drawn with the inputs' seed offset."""
    entries = [(condition, seed) for condition, by_seed in results.items() for seed in by_seed]
    draw = rng(2100)
    reruns = [entries[i] for i in sorted(draw.choice(len(entries), size=min(_RERUNS, len(entries)), replace=False))]
    condition = list(results)[int(draw.integers(len(results)))]
    used, fresh = {int(seed) for _, seed in entries}, []
    while len(fresh) < _FRESH + _MORE:
        seed = int(draw.integers(0, 10_000 + 2 * len(used)))  # at least half of the range is free
        if seed not in used:
            used.add(seed)
            fresh.append(seed)
    return reruns, condition, fresh


def _run_experiment(run_condition, results):
    reruns, condition, fresh = _draws(results)
    problem, mistakes, reproduced = "", (), []
    for c, seed in reruns:
        value, why = _call(run_condition, c, int(seed))
        recorded = _number(results[c][seed])
        if why is None and not math.isclose(value, recorded, rel_tol=1e-5, abs_tol=1e-8):
            why, mistakes = (f"run_condition({_shown(c)}, {_shown(seed)}) gave {value:.6g} now and {recorded:.6g} in `results`: "
                             "the experiment is not reproducible. Hint: seed everything the run uses (the model's "
                             "initialisation, the data, the optimizer), e.g. with train.seed_everything(seed) or "
                             "explicit generators, and keep one thread."), ("not_reproducible",)
        if why:
            problem = why
            break
        reproduced.append(f"{recorded:.6g} ({_shown(c)}, seed {_shown(seed)})")
    unseen = "a seed `results` does not have"
    values = []
    for n, seed in enumerate(fresh):
        if n >= _FRESH and any(not _same(v, values[0]) for v in values):
            break
        value, why = _call(run_condition, condition, seed)
        if why:  # after a rerun that failed too, the function does not run: that failure is the verdict
            return _Experiment(fake=problem or f"{why} ({unseen}): it should run the experiment for any seed, "
                               "not read a table.")
        values.append(value)
        if n == 0:
            again, why = _call(run_condition, condition, seed)
            if why or not _same(value, again):
                if problem:  # it reproduces neither: an experiment that is not seeded
                    return _Experiment(problem=problem, mistakes=mistakes)
                return _Experiment(fake=(
                    f"run_condition({_shown(condition)}, {seed}) ({unseen}) gave {value:.6g}, then "
                    f"{'an error' if why else f'{again:.6g}'}, while it gives back the numbers of `results` exactly: "
                    "a table read back, with made-up numbers for other seeds, is not an experiment."))
    seeds = ", ".join(str(s) for s in fresh[:len(values)])
    if all(_same(v, values[0]) for v in values):
        if not any(_same(values[0], _number(r)) for r in results[condition].values()):
            return _Experiment(fake=(
                f"for {len(values)} seeds `results` does not have ({seeds}), run_condition({_shown(condition)}, seed) gave "
                f"the same number every time, {values[0]:.6g}, which is none of the numbers `results` has for "
                f"{_shown(condition)}: a lookup with a made-up default is not an experiment. Hint: run_condition must train "
                "and measure for any seed; the grader calls it with seeds of its own."))
        if all(_same(_number(v), _number(next(iter(by_seed.values())))) for by_seed in results.values()
               for v in by_seed.values()):
            return _Experiment(fake=(
                f"run_condition({_shown(condition)}, seed) gave {values[0]:.6g} for every seed tried ({seeds}, and those of "
                "`results`), and every condition of `results` has one number for all its seeds: a number that does "
                "not change with the seed is not an experiment with several seeds. Hint: seed the initialisation "
                "and the batches with `seed`; if your measure saturates (an accuracy of 1.0 for every seed), take a "
                "smaller budget or a finer measure."))
    if problem:
        return _Experiment(problem=problem, mistakes=mistakes)
    return _Experiment(summary=(
        "run_condition reproduces " + " and ".join(reproduced) + f", and runs for seeds `results` does not have "
        f"({_shown(condition)}: " + ", ".join(f"seed {s} {v:.6g}" for s, v in zip(fresh, values)) + ", the first twice the same)."))


# check_reproducible and check_seeds run the same experiment; in the grader a run trains a model in the
# learner's kernel, so check_seeds reads the verdict check_reproducible left here (the grader's stand-ins
# for one learner function of one kernel compare equal), for the same results and seed offset
_last_experiment = {}


def _experiment(run_condition, results, again=False):
    """The ``_Experiment`` of ``run_condition`` and ``results``: run now when ``again`` or not run last."""
    key = (run_condition, repr(results), _engine.SEED_OFFSET)
    if again or _last_experiment.get("key") != key:
        _last_experiment.clear()
        _last_experiment.update(key=key, verdict=_run_experiment(run_condition, results))
    return _last_experiment["verdict"]


@_names_the_mistake
def check_reproducible(run_condition, results):
    """``run_condition(condition, seed)`` is an experiment behind ``results``: rerun on two entries of
    ``results`` it gives their numbers, and on seeds of the check's own (integers ``results`` lacks, drawn
    with the inputs' seed offset) it runs, gives the same number twice for the same seed and numbers that
    change with the seed: a constant, or a table read back with a default, is no experiment."""
    problem = _results_problem(results)
    if problem:
        return CheckResult("reproducible", False, problem)
    if not callable(run_condition):
        return CheckResult("reproducible", False, "expected `run_condition` to be a function (condition, seed) -> number.")
    verdict = _experiment(run_condition, results, again=True)
    if verdict.fake or verdict.problem:
        return CheckResult("reproducible", False, verdict.fake or verdict.problem, mistakes=verdict.mistakes)
    return CheckResult("reproducible", True, verdict.summary)


_NOT_GIVEN = object()   # check_seeds without run_condition (the student's own check cell), not run_condition=None


@_names_the_mistake
def check_seeds(results, run_condition=_NOT_GIVEN):
    """At least three integer seeds per condition, the same seeds in every condition; with ``run_condition``
    (the grader passes it, whatever the notebook defines, None included), the numbers must come from an
    experiment (``check_reproducible``'s runs: it runs for seeds ``results`` lacks and its numbers change
    with the seed)."""
    problem = _results_problem(results)
    if problem:
        return CheckResult("seeds", False, problem)
    seeds = [set(by_seed) for by_seed in results.values()]
    if any(len(s) < 3 for s in seeds):
        return CheckResult("seeds", False, "expected at least 3 seeds per condition, got "
                           + ", ".join(f"{_shown(c)}: {len(s)}" for c, s in zip(results, seeds))
                           + ": with fewer than 3 seeds the spread between seeds is not measured (one pair of "
                           "seeds can agree or disagree by chance), so an effect cannot be told from it.")
    if any(s != seeds[0] for s in seeds):
        return CheckResult("seeds", False, "expected the same seeds in every condition (paired runs), got "
                           + ", ".join(f"{_shown(c)}: {sorted(s)}" for c, s in zip(results, seeds)) + ".")
    if run_condition is not _NOT_GIVEN:
        if not callable(run_condition):
            return CheckResult("seeds", False, "expected `run_condition` to be a function (condition, seed) -> number.")
        fake = _experiment(run_condition, results).fake
        if fake:
            return CheckResult("seeds", False, fake)
    return CheckResult("seeds", True, f"{len(seeds[0])} paired seeds in each of {len(seeds)} conditions.")


# ----------------------------------------------------------------------------- problem set 3: Markov floors

LOG2 = math.log(2.0)


def _stationary(P):
    """pi with pi P = pi: the left eigenvector of P for the eigenvalue 1, normalised to sum to 1."""
    values, vectors = np.linalg.eig(P.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return pi / pi.sum()


def _floors(P, weights="stationary", log=LOG2, shuffled="stationary"):
    """(entropy rate sum_i pi_i H(P_i), entropy of pi) in bits: the floors with and without the order."""
    n = P.shape[0]
    pi = {"stationary": _stationary(P), "uniform": np.full(n, 1.0 / n)}
    rows = -(P * np.log(np.where(P > 0, P, 1.0))).sum(axis=1) / log
    marginal = {"stationary": pi["stationary"], "uniform": np.full(n, 1.0 / n), "mean_row": P.mean(axis=0)}[shuffled]
    h_marginal = float(-(marginal * np.log(np.where(marginal > 0, marginal, 1.0))).sum() / log)
    return float(pi[weights] @ rows), h_marginal


_FLOOR_FLAWS = [  # knob, value, words, the mistake named without the answer (a graded problem set shows that)
    ("log", 1.0, "you answered in nats: divide by ln 2 for bits.", "you answered in nats, not bits."),
    ("weights", "uniform", "the entropy rate weights each row by the stationary probability of its state, "
                           "sum_i pi_i H(P_i), not by 1/n (that is the paper's h_min, right only when pi is uniform). "
                           "If you solved P pi = pi, you found the all-ones vector: rows of P are 'from' states, "
                           "so pi is the *left* eigenvector, pi P = pi (an eigenvector of P^T).",
     "the rows are weighted by 1/n, not by how often each state occurs."),
    ("shuffled", "uniform", "the shuffled sequence keeps each symbol's frequency: its floor is H(pi), "
                            "not log2(n) (that would be a uniform distribution).",
     "the shuffled floor treats every symbol as equally frequent."),
    ("shuffled", "mean_row", "the frequencies of a shuffled sequence are the stationary pi, not the average row "
                             "of P (they agree only when P is doubly stochastic).",
     "the shuffled floor takes the average row of P as the symbols' frequencies."),
]


def _markov_cases():
    cases = []
    for n, size in enumerate((3, 4, 5, 6)):
        draw = rng(2000 + n)
        P = draw.dirichlet(np.full(size, 0.6), size=size)
        P += np.eye(size) * (0.5 + 0.1 * n)  # sticky, so the two floors differ clearly
        cases.append(P / P.sum(axis=1, keepdims=True))
    return cases


def _shown(value, limit=60):
    """``repr(value)`` for a message, shortened: the learner's own names and keys can be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


@_names_the_mistake
def check_markov_floors(fn):
    """Check ``fn(P) -> (rate_bits, shuffled_bits)`` for a transition matrix P (n, n), rows 'from' states: the
    two floors the question asks for (the chain's, and that of its tokens shuffled), both in bits."""
    name = "markov_floors"
    if (verdict := not_callable(name, ["P"], fn)) is not None:
        return verdict
    answers = []
    cases = _markov_cases()
    for n, P in enumerate(cases):
        try:
            got = fn(torch.from_numpy(P.copy()))
            got = tuple(float(g) for g in got)
        except _engine.LEARNER_ERRORS as exc:  # a verdict, never a traceback
            return CheckResult(name, False, f"on a {P.shape[0]}-state chain your function raised or did not return "
                               f"two numbers: {type(exc).__name__}: {str(exc)[:200]}. Return (rate_bits, "
                               "shuffled_bits), two floats (or 0-d tensors).")
        if len(got) != 2 or not all(math.isfinite(g) for g in got):
            return CheckResult(name, False, f"expected two finite numbers (rate_bits, shuffled_bits), got {got!r}.")
        answers.append(got)
    expected = [_floors(P) for P in cases]
    labels = ("The entropy rate", "The shuffled floor")
    wrong, right, knobs, shown = [], [], [], []  # knobs: each wrong floor's named mistake (None: none fits)
    for i, label in enumerate(labels):
        if all(math.isclose(a[i], e[i], rel_tol=1e-6, abs_tol=1e-9) for a, e in zip(answers, expected)):
            right.append(label)
            continue
        flaw = next(((knob, words, short) for knob, value, words, short in _FLOOR_FLAWS
                     if all(math.isclose(a[i], _floors(P, **{knob: value})[i], rel_tol=1e-6, abs_tol=1e-9)
                            for a, P in zip(answers, cases))), (None, None, None))
        knobs.append(flaw[0])
        reason, named = flaw[1], flaw[2]
        if reason is None and all(math.isclose(a[i], _floors(P, weights="uniform", log=1.0)[i], rel_tol=1e-6)
                                  for a, P in zip(answers, cases)):
            reason = "two mistakes: uniform weights instead of the stationary pi, and nats instead of bits."
            named = "two mistakes: the rows are weighted by 1/n, and the answer is in nats."
        if reason is None:
            P, a, e = cases[0], answers[0], expected[0]
            reason = (f"on the {P.shape[0]}-state chain you returned {a[i]:.6g} bits, the reference is {e[i]:.6g}. "
                      "Compare with rate = sum_i pi_i H(P_i), shuffled = H(pi), pi P = pi, in bits.")
            named = f"on the {P.shape[0]}-state chain you returned {a[i]:.6g} bits, which differs from the reference."
        wrong.append(f"{label} is wrong: {reason}")
        shown.append(f"{label} is wrong: {named or without_answer(reason)}")
    if wrong:
        named = tuple(dict.fromkeys(knobs)) if None not in knobs else ()
        return CheckResult(name, False, " ".join(wrong), labels, tuple(right), named, " ".join(shown))
    return CheckResult(name, True, f"both floors match the reference on {len(cases)} random sticky chains.",
                       labels, labels)
