"""Exercise checks that explain a wrong answer in words.

Each ``check_*`` function takes the learner's implementation of one formula of
``bayesattn_lite.attention`` and runs it on a few random problems: fixed seeds, float64, one
sequence (unbatched (T, d) tensors) of T >= 4 positions, with T, d_x, d_k, d_v and n_classes all
different so that a transposed answer cannot pass by accident. It compares the output with the
reference and returns a ``CheckResult``, which a notebook displays as "✅ name: message" or
"❌ name: message". A check never raises, whatever the learner's function does.

When the answer is wrong the check says why. It recomputes the formula with the usual mistakes
(a flipped sign, a forgotten 1/T, a transpose too few, ...), alone and two at a time, and names
the one that reproduces the learner's numbers. When none does, it reports the largest error, where
it is, and the formula to compare against.

    from bayesattn_lite import checks
    checks.check_score_gradient(my_score_gradient)     # -> ✅ score_gradient: matches ...
"""

import html
import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from . import attention, diagnostics, em

__all__ = [
    "CheckResult",
    "check_error_signal",
    "check_score_gradient",
    "check_qkv_gradients",
    "check_projection_gradients",
]

RTOL, ATOL = 1e-6, 1e-9
DTYPE = torch.float64

# (T, d_x, d_k, d_v, n_classes). Within a row every size differs, so each axis can be named from
# its length and a transpose changes the shape or the numbers; d_k > 1 keeps 1/sqrt(d_k) != 1/d_k.
SIZES = [(4, 6, 3, 5, 2), (5, 3, 2, 4, 6), (7, 5, 4, 3, 8), (6, 8, 5, 2, 3), (9, 4, 6, 7, 5)]


def _is_causal(n):
    """Half of the problems use a causal mask (zeros above the diagonal of alpha), half do not."""
    return n % 2 == 0


# ----------------------------------------------------------------------------- result

@dataclass(repr=False)
class CheckResult:
    """The verdict of one check: truthy when it passed; a notebook shows it as one line."""

    name: str
    passed: bool
    message: str

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return f"{'✅' if self.passed else '❌'} {self.name}: {self.message}"

    def _repr_markdown_(self):
        # escape < > &: an exception message such as "<lambda>() takes ..." would vanish as an HTML tag
        return html.escape(repr(self), quote=False)


# ----------------------------------------------------------------------------- specification

@dataclass(frozen=True)
class _Flaw:
    """A typical mistake: the reference computed with ``knob=value``, and what that means."""

    knob: str
    value: object
    words: str


@dataclass
class _Output:
    """One tensor the learner returns, with the ways of getting it wrong."""

    label: str
    dims: tuple  # names of its axes, e.g. ("T", "d_v")
    formula: str
    compute: Callable  # compute(inputs, **knobs); without knobs it is the right answer
    flaws: list
    transpose_hint: str = ""
    shape_hints: dict = field(default_factory=dict)  # axis names of a wrong shape -> explanation


@dataclass
class _Case:
    inputs: dict  # argument name -> tensor, in call order
    expected: tuple  # the reference outputs
    dims: dict  # axis name -> size
    note: str  # "T=7, causal", to say which input went wrong


@dataclass
class _Spec:
    name: str
    signature: dict  # argument name -> axis names
    outputs: list
    cases: list
    hint: str  # what to check when the function raised on a shape mismatch


def _case(signature, inputs, expected, note):
    dims = {}
    for name, axes in signature.items():
        dims.update(zip(axes, inputs[name].shape))
    return _Case(inputs, tuple(expected), dims, note)


# ----------------------------------------------------------------------------- running a check

def _run(spec, fn):
    answers = []
    for case in spec.cases:
        try:  # clones: an in-place operation of the learner must not touch the check's data
            got = fn(*(t.clone() for t in case.inputs.values()))
        except Exception as exc:  # the learner gets a verdict, never a traceback
            return CheckResult(spec.name, False, _exception_message(spec, case, exc))
        got, problem = _as_tensors(spec, case, got)
        if problem:
            return CheckResult(spec.name, False, problem)
        answers.append(got)

    verdicts = []
    for i in range(len(spec.outputs)):
        mine = [a[i] for a in answers]
        right = all(_close(m, c.expected[i]) for m, c in zip(mine, spec.cases))
        verdicts.append(None if right else _diagnose(spec, i, mine))
    if all(v is None for v in verdicts):
        return CheckResult(spec.name, True, f"matches the reference on {len(spec.cases)} random inputs.")
    return CheckResult(spec.name, False, _combine(spec, verdicts))


def _close(a, b):
    return torch.allclose(a, b, rtol=RTOL, atol=ATOL)


def _combine(spec, verdicts):
    """One output: its explanation. Several: which are right, then what is wrong, each explanation once."""
    if len(spec.outputs) == 1:
        return verdicts[0]
    right = [o.label for o, v in zip(spec.outputs, verdicts) if v is None]
    wrong = {}  # explanation -> the outputs it explains, so a mistake made twice is told once
    for o, v in zip(spec.outputs, verdicts):
        if v is not None:
            wrong.setdefault(v, []).append(o.label)
    parts = [f"{_join(right)} {_is(right)} right;"] if right else []
    parts += [f"{_join(labels)} {_is(labels)} wrong: {v}" for v, labels in wrong.items()]
    return " ".join(parts)


def _join(words):
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _is(words):
    return "is" if len(words) == 1 else "are"


# ----------------------------------------------------------------------------- what came back

def _as_tensors(spec, case, got):
    """The learner's outputs as a tuple of float64 tensors, or (None, a sentence saying why not)."""
    n = len(spec.outputs)
    if n == 1:
        items = (got,)
    else:
        want = f"a tuple of {n} tensors ({', '.join(o.label for o in spec.outputs)})"
        if not isinstance(got, (tuple, list)) or len(got) != n:
            return None, f"expected {want}, got {_type_name(got)}."
        items = tuple(got)
    tensors = []
    for out, item in zip(spec.outputs, items):
        tensor, problem = _as_tensor(out, case, item, where=f"{out.label}: " if n > 1 else "")
        if problem:
            return None, problem
        tensors.append(tensor)
    return tuple(tensors), None


def _as_tensor(out, case, item, where):
    expected = tuple(case.dims[a] for a in out.dims)
    want = f"a tensor of shape {expected} {_axes(out.dims)}"
    if isinstance(item, np.ndarray):  # numpy is fine: only the numbers matter
        if item.dtype.kind not in "biuf":
            return None, f"{where}expected {want}, got a numpy array of dtype {item.dtype}."
        item = torch.from_numpy(item)
    if not isinstance(item, torch.Tensor):
        return None, f"{where}expected {want}, got {_type_name(item)}."
    shape = tuple(item.shape)
    if shape != expected:
        return None, f"{where}expected {want}, got {shape}{_named(shape, case)}.{_shape_hint(out, case, shape)}"
    if item.dtype != DTYPE:
        return None, (f"{where}expected dtype {DTYPE} (the dtype of the inputs), got {item.dtype}. "
                      "Tensors made without dtype= (torch.zeros, torch.tensor) default to float32: "
                      "use torch.zeros_like or dtype=<input>.dtype.")
    item = item.detach().cpu()
    if not torch.isfinite(item).all():
        what = "NaN" if torch.isnan(item).any() else "inf"
        index = _index(~torch.isfinite(item))
        return None, (f"{where}the result contains {what} (first at index {index}, input {case.note}). "
                      "Typical causes: a masked -inf score multiplied by 0, a log of 0, a division by 0.")
    return item, None


def _axes(names):
    """('T',) -> '(T,)' and ('T', 'd_v') -> '(T, d_v)', written like the shapes they name."""
    return str(tuple(names)).replace("'", "")


def _type_name(obj):
    if obj is None:
        return "None (does the function end with return?)"
    if isinstance(obj, (tuple, list)):
        return f"a {type(obj).__name__} of length {len(obj)}"
    if isinstance(obj, torch.Tensor):
        return f"a single tensor of shape {tuple(obj.shape)}"
    return type(obj).__name__


def _named(shape, case):
    """' = (T, d_v)' when every length in ``shape`` is one of the problem's sizes, else ''."""
    by_size = {size: name for name, size in case.dims.items()}
    if shape and all(s in by_size for s in shape):
        return f" = {_axes(by_size[s] for s in shape)}"
    return ""


def _shape_hint(out, case, shape):
    if len(shape) == 2 and shape == tuple(case.dims[a] for a in reversed(out.dims)):
        return " " + (out.transpose_hint or "That is the transpose of the expected shape.")
    by_size = {size: name for name, size in case.dims.items()}
    axes = tuple(by_size.get(s, "?") for s in shape)
    return " " + out.shape_hints[axes] if axes in out.shape_hints else ""


def _index(mask):
    """The first True entry of a boolean tensor, as a tuple of ints."""
    flat = int(mask.flatten().nonzero()[0, 0])
    return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape)))


def _exception_message(spec, case, exc):
    text = str(exc).strip()
    first_line = text.splitlines()[0][:200] if text else "(no message)"
    called = ", ".join(
        f"{name} {tuple(t.shape)}{'' if t.dtype == DTYPE else ' ' + str(t.dtype).replace('torch.', '')}"
        f" = {_axes(spec.signature[name])}"
        for name, t in case.inputs.items()
    )
    returns = _join([f"{o.label} {tuple(case.dims[a] for a in o.dims)} = {_axes(o.dims)}" for o in spec.outputs])
    message = (f"your function raised {type(exc).__name__}: {first_line}. "
               f"It was called with {called}, and should return {returns}.")
    if any(w in first_line.lower() for w in ("multipl", "size of tensor", "shape", "dimension", "mismatch")):
        message += (" A shape mismatch in a product usually means a missing or extra transpose: "
                    f"write each tensor's shape next to it. {spec.hint}")
    return message


# ----------------------------------------------------------------------------- what went wrong

def _flaw_sets(flaws):
    """Each mistake alone, then every pair of mistakes on different knobs."""
    yield from ((f,) for f in flaws)
    for a, b in itertools.combinations(flaws, 2):
        if a.knob != b.knob:
            yield (a, b)


def _diagnose(spec, i, mine):
    out = spec.outputs[i]
    for flaws in _flaw_sets(out.flaws):
        knobs = {f.knob: f.value for f in flaws}
        if all(_close(m, out.compute(c.inputs, **knobs)) for m, c in zip(mine, spec.cases)):
            if len(flaws) == 1:
                return flaws[0].words
            return f"two mistakes at once. (1) {flaws[0].words} (2) {flaws[1].words}"
    return _unknown(out, spec.cases, mine, i)


def _unknown(out, cases, mine, i):
    """No known mistake fits: say whether it is a scaled copy, else where the largest error is."""
    compare = f"Compare with {out.formula}."
    if all(torch.all(m == 0) for m in mine):
        return f"it is all zeros (a placeholder left in?). {compare}"
    refs = [c.expected[i] for c in cases]
    factors = [float((m * r).sum() / (r * r).sum()) for m, r in zip(mine, refs)]
    if all(_close(m, f * r) for m, f, r in zip(mine, factors, refs)):
        if all(math.isclose(f, factors[0], rel_tol=1e-6) for f in factors):
            return f"it is {factors[0]:.4g} times the right answer on every input: a constant factor is off. {compare}"
        listed = ", ".join(f"x{f:.4g} for {c.note}" for f, c in zip(factors, cases))
        return (f"it is a multiple of the right answer, by a factor that changes with the sizes ({listed}): "
                f"a size-dependent factor such as 1/T or 1/sqrt(d_k) is off. {compare}")
    n = next(n for n, (m, r) in enumerate(zip(mine, refs)) if not _close(m, r))
    error = (mine[n] - refs[n]).abs()
    index = _index(error == error.max())
    return (f"largest absolute error {float(error.max()):.3g} at index {index} on input {n + 1} of {len(cases)} "
            f"({cases[n].note}): you returned {float(mine[n][index]):.6g}, the reference is "
            f"{float(refs[n][index]):.6g}. {compare}")


# ----------------------------------------------------------------------------- problems

def _random_problem(n, seed):
    """x, y, params of problem ``n`` of SIZES, with weights large enough that alpha is far from uniform."""
    T, d_x, d_k, d_v, n_classes = SIZES[n]
    gen = torch.Generator().manual_seed(seed + n)
    x = torch.randn(T, d_x, generator=gen, dtype=DTYPE)
    y = torch.randint(0, n_classes, (T,), generator=gen)
    params = attention.init_params(d_x, d_k, d_v, n_classes, std=0.7, seed=seed + n, dtype=DTYPE)
    return x, y, params


def _note(T, causal=None):
    return f"T={T}" + ("" if causal is None else ", causal" if causal else ", full attention")


# ----------------------------------------------------------------------------- error signal

def _u(inp, sign=1, axis=-1, target=True, log=False, mean=True):
    logits, y, W_O = inp["logits"], inp["y"], inp["W_O"]
    probs = (torch.log_softmax if log else torch.softmax)(logits, dim=axis)
    if target:
        probs = probs - torch.nn.functional.one_hot(y.long(), logits.shape[-1]).to(DTYPE)
    T = logits.shape[0]
    return (sign * probs / (T if mean else 1)) @ W_O


_U_FLAWS = [
    _Flaw("sign", -1, "wrong sign: you computed W_O^T (onehot(y_i) - softmax(z_i)) / T. The gradient of "
          "the cross-entropy with respect to the logits is prediction minus target, softmax(z_i) - onehot(y_i)."),
    _Flaw("axis", 0, "softmax over the wrong axis: you normalised each class over the T positions (dim 0). "
          "The probabilities of position i are a softmax over the classes of its own logits z_i: "
          "torch.softmax(logits, dim=-1)."),
    _Flaw("mean", False, "missing the 1/T averaging: your u is T times too large (the gradient of the sum of "
          "the cross-entropies). L is the mean over the T positions, so u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T."),
    _Flaw("target", False, "the target is missing: you used softmax(z_i) alone. Subtract onehot(y_i): "
          "u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T."),
    _Flaw("log", True, "you used log-probabilities (log_softmax). The derivative of -log softmax(z)_y with "
          "respect to z is softmax(z) - onehot(y), with the probabilities themselves."),
]

_U = _Output(
    "u", ("T", "d_v"),
    "u = (softmax(logits, dim=-1) - onehot(y)) @ W_O / T, i.e. u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T",
    _u, _U_FLAWS,
    transpose_hint="Transposed: u has one row per position. With positions as rows, u_i = W_O^T (...) "
                   "becomes (softmax - onehot) @ W_O / T.",
    shape_hints={("T", "n_classes"): "That is dL/dz, one entry per class: bring it back to g's space "
                                      "with W_O (stored (n_classes, d_v)), u = dlogits @ W_O."},
)


def _error_signal_spec():
    signature = {"logits": ("T", "n_classes"), "y": ("T",), "W_O": ("n_classes", "d_v")}
    cases = []
    for n, (T, _, _, d_v, n_classes) in enumerate(SIZES):
        gen = torch.Generator().manual_seed(100 + n)
        logits = 2.0 * torch.randn(T, n_classes, generator=gen, dtype=DTYPE)
        y = torch.randint(0, n_classes, (T,), generator=gen)
        W_O = torch.randn(n_classes, d_v, generator=gen, dtype=DTYPE)
        expected = attention.error_signal(logits, y, W_O)[1]
        cases.append(_case(signature, {"logits": logits, "y": y, "W_O": W_O}, [expected], _note(T)))
    hint = ("W_O is stored (n_classes, d_v) and the positions are rows, so the W_O^T of the formula "
            "becomes a product on the right: (softmax - onehot) @ W_O / T.")
    return _Spec("error_signal", signature, [_U], cases, hint)


def check_error_signal(fn):
    """Check ``fn(logits, y, W_O) -> u``, u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T, shape (T, d_v)."""
    return _run(_error_signal_spec(), fn)


# ----------------------------------------------------------------------------- score gradient

def _ds(inp, sign=1, mean="keys", weights=True):
    alpha, b = inp["alpha"], inp["b"]
    weighted = alpha * b
    expected_b = {
        "keys": lambda: weighted.sum(dim=-1, keepdim=True),
        "queries": lambda: weighted.sum(dim=0, keepdim=True),
        "no_keepdim": lambda: weighted.sum(dim=-1),  # (T,) broadcasts as a row
        "unweighted": lambda: b.mean(dim=-1, keepdim=True),
        "none": lambda: 0.0,
    }[mean]()
    centred = b - expected_b
    return sign * (alpha * centred if weights else centred)


_DS_FLAWS = [
    _Flaw("sign", -1, "wrong sign: you returned alpha * (E_alpha[b] - b) = alpha * advantage. Raising s_ij "
          "moves weight onto key j, which changes L by b_ij minus the row's weighted mean, so "
          "dL/ds_ij = +alpha_ij (b_ij - E_alpha[b])."),
    _Flaw("mean", "none", "missing the subtraction of the attention-weighted mean: alpha * b is only the direct "
          "path. The weights of a row sum to 1, so raising one takes weight from the others, which subtracts "
          "the row's E_alpha[b] = sum_j alpha_ij b_ij: dL/ds_ij = alpha_ij (b_ij - E_alpha[b])."),
    _Flaw("mean", "queries", "the weighted mean is taken over the wrong axis: you summed alpha_ij b_ij over the "
          "queries i (dim 0, down a column). E_alpha[b] of row i sums over the keys j of that row: "
          "(alpha * b).sum(dim=-1, keepdim=True)."),
    _Flaw("mean", "no_keepdim", "the weighted mean broadcasts along the wrong axis: (alpha * b).sum(dim=-1) has "
          "shape (T,), which broadcasts as a row, so column j got the mean of row j. Keep the axis with "
          ".sum(dim=-1, keepdim=True) so that row i subtracts its own E_alpha[b]."),
    _Flaw("mean", "unweighted", "the mean is not attention-weighted: you subtracted the plain average of b over "
          "the keys. The softmax subtracts the weighted mean E_alpha[b] = sum_j alpha_ij b_ij."),
    _Flaw("weights", False, "the weights alpha are missing in front: you returned b - E_alpha[b]. A score acts "
          "only through its weight, dL/ds_ij = alpha_ij (b_ij - E_alpha[b]), so masked keys (alpha = 0) get 0."),
]

_DS = _Output(
    "dL/ds", ("T", "T"),
    "dL/ds = alpha * (b - (alpha * b).sum(dim=-1, keepdim=True)), i.e. alpha_ij (b_ij - sum_k alpha_ik b_ik)",
    _ds, _DS_FLAWS,
    shape_hints={("T",): "One number per row: that is the weighted mean E_alpha[b]; dL/ds has one entry per "
                         "score, alpha * (b - E_alpha[b]).",
                 ("T", "?"): "Did a keepdim=True end up in the wrong place?"},
)


def _score_gradient_spec():
    signature = {"alpha": ("T", "T"), "b": ("T", "T")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = torch.Generator().manual_seed(200 + n)
        scores = 2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)  # peaked rows: far from uniform
        if _is_causal(n):
            scores = scores.masked_fill(~attention.causal_mask(T), float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        b = torch.randn(T, T, generator=gen, dtype=DTYPE)
        expected = attention.score_gradient(alpha, b)[0]
        cases.append(_case(signature, {"alpha": alpha, "b": b}, [expected], _note(T, _is_causal(n))))
    hint = "alpha and b are (T, T), queries on the rows and keys on the columns."
    return _Spec("score_gradient", signature, [_DS], cases, hint)


def check_score_gradient(fn):
    """Check ``fn(alpha, b) -> dL/ds`` = alpha * (b - E_alpha[b]), E_alpha[b]_i = sum_j alpha_ij b_ij."""
    return _run(_score_gradient_spec(), fn)


# ----------------------------------------------------------------------------- q, k, v gradients

_SCALES = {"1/sqrt(d_k)": lambda d: d ** -0.5, "1": lambda d: 1.0, "1/d_k": lambda d: 1.0 / d,
           "sqrt(d_k)": lambda d: d ** 0.5}


def _through_scores(transpose, partner):
    """dq (ds @ k) or dk (ds^T @ q), scaled by 1/sqrt(d_k), with knobs for the usual slips."""
    def compute(inp, sign=1, scale="1/sqrt(d_k)", transpose=transpose, partner=partner):
        ds = inp["ds"].T if transpose else inp["ds"]
        return sign * _SCALES[scale](inp["q"].shape[-1]) * (ds @ inp[partner])
    return compute


def _dv(inp, sign=1, weights="alpha", transpose=True, scaled=False):
    w = inp[weights].T if transpose else inp[weights]
    return sign * (inp["q"].shape[-1] ** -0.5 if scaled else 1.0) * (w @ inp["u"])


def _scale_flaws():
    why = "the scores are s_ij = q_i . k_j / sqrt(d_k), so the chain rule carries 1/sqrt(d_k) into dq and dk."
    return [
        _Flaw("scale", "1", f"missing the 1/sqrt(d_k): {why}"),
        _Flaw("scale", "1/d_k", f"divided by d_k instead of sqrt(d_k): {why}"),
        _Flaw("scale", "sqrt(d_k)", f"multiplied by sqrt(d_k) where the formula divides by it: {why}"),
        _Flaw("sign", -1, "wrong sign: dq = +ds @ k / sqrt(d_k) and dk = +ds^T @ q / sqrt(d_k) (the minus sign "
              "of the advantage form is already inside ds)."),
    ]


_DQ = _Output(
    "dq", ("T", "d_k"), "dq = ds @ k / sqrt(d_k)", _through_scores(False, "k"),
    _scale_flaws() + [
        _Flaw("transpose", True, "transposed ds: query i collects from the keys j of its own row, "
              "dq_i = sum_j ds_ij k_j / sqrt(d_k), which is ds @ k, not ds^T @ k."),
        _Flaw("partner", "q", "used q where k belongs: s_ij = q_i . k_j / sqrt(d_k) changes with q_i at the "
              "rate k_j / sqrt(d_k), so dq = ds @ k / sqrt(d_k)."),
    ],
)

_DK = _Output(
    "dk", ("T", "d_k"), "dk = ds^T @ q / sqrt(d_k)", _through_scores(True, "q"),
    _scale_flaws() + [
        _Flaw("transpose", False, "transpose missing: key j collects from every query i that looks at it, "
              "dk_j = sum_i ds_ij q_i / sqrt(d_k), which is ds^T @ q (you used ds @ q)."),
        _Flaw("partner", "k", "used k where q belongs: s_ij = q_i . k_j / sqrt(d_k) changes with k_j at the "
              "rate q_i / sqrt(d_k), so dk = ds^T @ q / sqrt(d_k)."),
    ],
)

_DV = _Output(
    "dv", ("T", "d_v"), "dv = alpha^T @ u", _dv,
    [
        _Flaw("transpose", False, "transpose missing: v_j reaches every g_i through alpha_ij, so "
              "dv_j = sum_i alpha_ij u_i, which is alpha^T @ u (you used alpha @ u)."),
        _Flaw("weights", "ds", "used ds where alpha belongs: g = alpha @ v is linear in v, with the attention "
              "weights themselves as coefficients, so dv = alpha^T @ u."),
        _Flaw("scaled", True, "dv has no 1/sqrt(d_k): that scale sits inside the scores, which v does not "
              "enter; dv = alpha^T @ u."),
        _Flaw("sign", -1, "wrong sign: dv = +alpha^T @ u."),
    ],
)


def _qkv_spec():
    signature = {"q": ("T", "d_k"), "k": ("T", "d_k"), "v": ("T", "d_v"),
                 "alpha": ("T", "T"), "ds": ("T", "T"), "u": ("T", "d_v")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        x, y, params = _random_problem(n, seed=300)
        fw = attention.forward(x, params, _is_causal(n))
        grads = attention.gradients(x, y, params, _is_causal(n))
        inputs = {"q": fw["q"], "k": fw["k"], "v": fw["v"], "alpha": fw["alpha"], "ds": grads["s"], "u": grads["u"]}
        expected = [grads["q"], grads["k"], grads["v"]]
        cases.append(_case(signature, inputs, expected, _note(T, _is_causal(n))))
    hint = ("ds and alpha are (T, T) with queries on the rows and keys on the columns: a sum over the queries i "
            "(for dk and dv) needs their transpose.")
    return _Spec("qkv_gradients", signature, [_DQ, _DK, _DV], cases, hint)


def check_qkv_gradients(fn):
    """Check ``fn(q, k, v, alpha, ds, u) -> (dq, dk, dv)``: ds @ k / sqrt(d_k), ds^T @ q / sqrt(d_k), alpha^T @ u."""
    return _run(_qkv_spec(), fn)


# ----------------------------------------------------------------------------- projection gradients

def _projection(own):
    """dW = d^T @ x (the sum over positions of d_t x_t^T), with knobs for the usual slips."""
    def compute(inp, sign=1, source=own, scale="1"):
        T, d_k = inp["x"].shape[0], inp["dq"].shape[-1]
        factor = {"1": 1.0, "1/T": 1.0 / T, "1/sqrt(d_k)": d_k ** -0.5}[scale]
        return sign * factor * (inp[source].T @ inp["x"])
    return compute


def _projection_output(name, own, out_dim, other=None):
    formula = f"{name} = {own}^T @ x"
    flaws = [
        _Flaw("sign", -1, "wrong sign: each dW = +d^T @ x, with d the gradient of that projection's output."),
        _Flaw("scale", "1/T", "divided by T: the 1/T of the mean loss is already inside dq, dk and dv (it came "
              "in through u), so each dW = d^T @ x sums over the positions."),
    ]
    if other:  # dW_Q and dW_K have the same shape, so a mix-up shows only in the numbers
        flaws += [
            _Flaw("scale", "1/sqrt(d_k)", "an extra 1/sqrt(d_k): that factor is already inside dq and dk, so "
                  "dW_Q = dq^T @ x and dW_K = dk^T @ x."),
            _Flaw("source", other, "built from the other one's gradient: each projection's gradient uses the "
                  "gradient of its own output, dW_Q = dq^T @ x and dW_K = dk^T @ x (check the order of the "
                  "returned tuple)."),
        ]
    return _Output(
        name, (out_dim, "d_x"), formula, _projection(own), flaws,
        transpose_hint=f"Transposed: nn.Linear stores (out, in), so {formula} has shape ({out_dim}, d_x); "
                       f"x^T @ {own} gives (d_x, {out_dim}).",
        shape_hints={("T", out_dim, "d_x"): "One outer product per position: sum them over the positions "
                                            f"({own}^T @ x does that).",
                     ("d_k" if out_dim == "d_v" else "d_v", "d_x"):
                         f"That is the shape of another projection's gradient: {formula} is ({out_dim}, d_x)."},
    )


def _projection_spec():
    signature = {"x": ("T", "d_x"), "dq": ("T", "d_k"), "dk": ("T", "d_k"), "dv": ("T", "d_v")}
    outputs = [_projection_output("dW_Q", "dq", "d_k", other="dk"),
               _projection_output("dW_K", "dk", "d_k", other="dq"),
               _projection_output("dW_V", "dv", "d_v")]
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        x, y, params = _random_problem(n, seed=400)
        grads = attention.gradients(x, y, params, _is_causal(n))
        inputs = {"x": x, "dq": grads["q"], "dk": grads["k"], "dv": grads["v"]}
        expected = [grads["W_Q"], grads["W_K"], grads["W_V"]]
        cases.append(_case(signature, inputs, expected, _note(T, _is_causal(n))))
    hint = ("x is (T, d_x) and dq is (T, d_k): the sum over positions of dq_t x_t^T is dq^T @ x, of shape "
            "(d_k, d_x) as nn.Linear stores (out, in).")
    return _Spec("projection_gradients", signature, outputs, cases, hint)


def check_projection_gradients(fn):
    """Check ``fn(x, dq, dk, dv) -> (dW_Q, dW_K, dW_V)``, each dW = d^T @ x of shape (d_out, d_x)."""
    return _run(_projection_spec(), fn)


# ============================================================================= problem sets 2 and 3
# Checks of the assignments (book/assignments, bayesattn_lite.assignments). The same contract:
# take the learner's object, never raise, say what is wrong in words.

__all__ += ["check_predicted_attention_change", "check_e_step", "check_m_step_means", "check_settling_step",
            "check_hypothesis", "check_reproducible", "check_seeds", "check_conclusion"]


# ----------------------------------------------------------------------------- next attention (chapter 4)

def _dalpha(inp, sign=1, centre=True, weights=True):
    alpha, advantage, eta = inp["alpha"], inp["advantage"], inp["eta"]
    ds = sign * eta * (alpha * advantage if weights else advantage)
    return alpha * (ds - (alpha * ds).sum(-1, keepdim=True)) if centre else alpha * ds


_DALPHA = _Output(
    "dalpha", ("T", "T"),
    "ds_ij = eta alpha_ij A_ij, then dalpha_ij = alpha_ij (ds_ij - sum_k alpha_ik ds_ik)",
    _dalpha,
    [_Flaw("sign", -1, "wrong sign: gradient descent moves the scores by -eta dL/ds = +eta alpha_ij A_ij "
                       "(a positive advantage raises the score)."),
     _Flaw("centre", False, "the softmax Jacobian is incomplete: you returned alpha_ij ds_ij. A softmax row "
                            "sums to 1, so its change must sum to 0: subtract alpha_ij sum_k alpha_ik ds_ik."),
     _Flaw("weights", False, "the score step is missing its alpha: dL/ds_ij = -alpha_ij A_ij (chapter 2), "
                             "so ds_ij = eta alpha_ij A_ij, not eta A_ij.")],
    transpose_hint="Transposed: queries are the rows. Keep alpha's layout.",
)


def _attention_change_spec():
    signature = {"alpha": ("T", "T"), "advantage": ("T", "T"), "eta": ()}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = torch.Generator().manual_seed(700 + n)
        scores = 2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)
        if _is_causal(n):
            scores = scores.masked_fill(~attention.causal_mask(T), float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        _, advantage = attention.score_gradient(alpha, torch.randn(T, T, generator=gen, dtype=DTYPE))
        advantage = advantage.masked_fill(alpha == 0, 0.0)
        inputs = {"alpha": alpha, "advantage": advantage, "eta": torch.tensor(0.5 + n, dtype=DTYPE)}
        cases.append(_case(signature, inputs, [_dalpha(inputs)], _note(T, _is_causal(n))))
    return _Spec("predicted_attention_change", signature, [_DALPHA], cases,
                 "alpha and advantage are (T, T), queries on the rows; eta is a number (a 0-d tensor).")


def check_predicted_attention_change(fn):
    """Check ``fn(alpha, advantage, eta) -> dalpha``, the first-order change of alpha after a step of
    size eta on the scores (``diagnostics.predicted_attention_change``)."""
    return _run(_attention_change_spec(), fn)


# ----------------------------------------------------------------------------- EM (chapter 5)

def _resp(inp, sign=-1, scale=2.0, axis=1):
    x, means, variance = inp["x"], inp["means"], inp["variance"]
    return torch.softmax(sign * torch.cdist(x, means).pow(2) / (scale * variance), dim=axis)


_RESP = _Output(
    "resp", ("n", "K"),
    "resp_ik = softmax_k(-||x_i - mu_k||^2 / (2 variance)) (equal mixing weights)",
    _resp,
    [_Flaw("sign", 1, "wrong sign: a point belongs to the *nearest* mean, so the logit is minus the squared "
                      "distance, -||x_i - mu_k||^2 / (2 variance)."),
     _Flaw("scale", 1.0, "the Gaussian's exponent is -||x - mu||^2 / (2 variance): you divided by variance "
                         "alone (a factor 2 is missing)."),
     _Flaw("axis", 0, "softmax over the wrong axis: each point's responsibilities are a distribution over "
                      "the K components (dim=1), not over the points.")],
    transpose_hint="Transposed: one row per point, one column per component.",
)


def _e_step_spec():
    signature = {"x": ("n", "d"), "means": ("K", "d"), "variance": ()}
    cases = []
    for n, (n_points, d, K) in enumerate([(7, 3, 2), (9, 4, 5), (6, 5, 3), (11, 2, 4)]):
        gen = torch.Generator().manual_seed(800 + n)
        inputs = {"x": torch.randn(n_points, d, generator=gen, dtype=DTYPE),
                  "means": torch.randn(K, d, generator=gen, dtype=DTYPE),
                  "variance": torch.tensor(0.3 + 0.4 * n, dtype=DTYPE)}
        expected = em.e_step(inputs["x"], inputs["means"], float(inputs["variance"]))[0]
        cases.append(_case(signature, inputs, [expected], f"n={n_points}, K={K}"))
    return _Spec("e_step", signature, [_RESP], cases,
                 "x is (n, d), means is (K, d); torch.cdist(x, means) gives the (n, K) distances.")


def check_e_step(fn):
    """Check ``fn(x, means, variance) -> resp`` (n, K): the E-step of a spherical Gaussian mixture with
    equal weights, a softmax of minus squared distances (chapter 5: an attention layer)."""
    return _run(_e_step_spec(), fn)


def _means(inp, normalise="count"):
    x, resp = inp["x"], inp["resp"]
    total = resp.T @ x
    if normalise == "count":
        return total / resp.sum(0)[:, None]
    return total / x.shape[0] if normalise == "n" else total


_MEANS = _Output(
    "means", ("K", "d"),
    "mu_k = sum_i resp_ik x_i / sum_i resp_ik",
    _means,
    [_Flaw("normalise", "none", "the weighted sum is not divided by anything: divide component k's sum by its "
                                "total responsibility N_k = sum_i resp_ik."),
     _Flaw("normalise", "n", "you divided by the number of points n; each mean is divided by its own "
                             "N_k = sum_i resp_ik (a component responsible for few points still gets a mean "
                             "of the right size).")],
    transpose_hint="Transposed: one row per component, mu = resp^T x / N.",
)


def _m_step_spec():
    signature = {"x": ("n", "d"), "resp": ("n", "K")}
    cases = []
    for n, (n_points, d, K) in enumerate([(7, 3, 2), (9, 4, 5), (6, 5, 3), (11, 2, 4)]):
        gen = torch.Generator().manual_seed(900 + n)
        inputs = {"x": torch.randn(n_points, d, generator=gen, dtype=DTYPE),
                  "resp": torch.softmax(2 * torch.randn(n_points, K, generator=gen, dtype=DTYPE), dim=1)}
        expected = em.m_step(inputs["x"], inputs["resp"])[0]
        cases.append(_case(signature, inputs, [expected], f"n={n_points}, K={K}"))
    return _Spec("m_step_means", signature, [_MEANS], cases, "x is (n, d), resp is (n, K): resp.T @ x is (K, d).")


def check_m_step_means(fn):
    """Check ``fn(x, resp) -> means`` (K, d): the M-step's responsibility-weighted means."""
    return _run(_m_step_spec(), fn)


# ----------------------------------------------------------------------------- settling (chapter 5)

def check_settling_step(fn):
    """Check ``fn(steps, rates, threshold) -> int or None``: the first step from which ``rates`` stays
    below ``threshold`` to the end (``diagnostics.settling_step``)."""
    steps = np.arange(0, 100, 10)
    cases = [  # (rates, threshold, what the case is about)
        (np.array([.5, .3, .2, .05, .02, .01, .008, .006, .004, .002]), 0.01, "a rate that decays"),
        (np.array([.5, .3, .005, .004, .02, .008, .006, .004, .003, .002]), 0.01,
         "a rate that dips below the threshold and comes back up before settling"),
        (np.array([.5, .3, .2, .1, .09, .08, .07, .06, .05, .04]), 0.01, "a rate that never settles (None)"),
        (np.full(10, 0.001), 0.01, "a rate that is below the threshold from the start"),
        (np.array([.5, np.nan, .005, .004, .003, .008, .006, .004, .003, .002]), 0.01, "a nan (not settled)"),
    ]
    for rates, threshold, about in cases:
        expected = diagnostics.settling_step(steps, rates, threshold)
        try:
            got = fn(steps.copy(), rates.copy(), threshold)
        except Exception as exc:  # noqa: BLE001 - a verdict, never a traceback
            return CheckResult("settling_step", False, f"your function raised {type(exc).__name__}: {exc} "
                               f"(on {about}).")
        if isinstance(got, (np.integer, torch.Tensor)) and np.ndim(got) == 0:
            got = int(got)
        if got != expected or type(got) is not type(expected):
            return CheckResult("settling_step", False, (
                f"on {about} (steps {steps.tolist()}, rates {rates.tolist()}, threshold {threshold}) you returned "
                f"{got!r}, expected {expected!r}. The frame settles at the first step from which the rate "
                "*stays* below the threshold until the end; None if it is above at the last step."))
    return CheckResult("settling_step", True, f"matches the reference on {len(cases)} rate curves.")


# ----------------------------------------------------------------------------- an experiment (chapters 7-8)

_MEASURES = ("bit", "error", "entropy", "kl", "accuracy", "loss", "rate", "step", "time")
_DIRECTIONS = ("lower", "higher", "less", "more", "faster", "slower", "smaller", "larger", "than",
               "increase", "decrease", "reduce", "improve", "worse", "better")
_VERDICTS = ("support", "refute", "confirm", "contradict", "consistent", "inconsistent", "holds", "does not hold",
             "falsif")


def check_hypothesis(hypothesis):
    """A hypothesis: a sentence of at least 12 words that names a measured quantity and a direction."""
    if not isinstance(hypothesis, str) or len(hypothesis.split()) < 12:
        return CheckResult("hypothesis", False, "expected `hypothesis` to be a sentence of at least 12 words "
                           f"(what you expect, on which task, measured how), got {hypothesis!r:.80}.")
    text = hypothesis.lower()
    if not any(w in text for w in _MEASURES):
        return CheckResult("hypothesis", False, "the hypothesis names no measured quantity: say what you will "
                           "measure (e.g. the entropy error in bits, the KL to the posterior, accuracy).")
    if not any(w in text for w in _DIRECTIONS):
        return CheckResult("hypothesis", False, "the hypothesis states no direction: say which condition "
                           "you expect to be lower/higher/faster than which, so that a measurement can refute it.")
    return CheckResult("hypothesis", True, "states a measurable quantity and a direction.")


def _results_problem(results):
    """None when ``results`` is {condition: {seed: finite number}} with >= 2 conditions, else why not."""
    if not isinstance(results, dict) or len(results) < 2:
        return ("expected `results` to be a dict {condition: {seed: number}} with at least two conditions "
                f"to compare, got {type(results).__name__} of length {len(results) if hasattr(results, '__len__') else '?'}.")
    for condition, by_seed in results.items():
        if not isinstance(by_seed, dict) or not by_seed:
            return f"results[{condition!r}]: expected a non-empty dict {{seed: number}}, got {type(by_seed).__name__}."
        for seed, value in by_seed.items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                return f"results[{condition!r}][{seed!r}]: expected a number, got {type(value).__name__}."
            if not math.isfinite(value):
                return f"results[{condition!r}][{seed!r}] is {value}: a run diverged or a metric is undefined."
    return None


def check_reproducible(run_condition, results):
    """``run_condition(condition, seed)`` rerun for one (condition, seed) of ``results`` gives the same number."""
    problem = _results_problem(results)
    if problem:
        return CheckResult("reproducible", False, problem)
    if not callable(run_condition):
        return CheckResult("reproducible", False, "expected `run_condition` to be a function (condition, seed) -> number.")
    condition = next(iter(results))
    seed = next(iter(results[condition]))
    try:
        again = float(run_condition(condition, seed))
    except Exception as exc:  # noqa: BLE001
        return CheckResult("reproducible", False, f"run_condition({condition!r}, {seed!r}) raised "
                           f"{type(exc).__name__}: {str(exc)[:200]}")
    recorded = float(results[condition][seed])
    if not math.isclose(again, recorded, rel_tol=1e-5, abs_tol=1e-8):
        return CheckResult("reproducible", False, (
            f"run_condition({condition!r}, {seed!r}) gave {again:.6g} now and {recorded:.6g} in `results`: "
            "seed everything the run uses (the model's initialisation, the data, the optimizer), e.g. with "
            "train.seed_everything(seed) or explicit generators, and keep one thread."))
    return CheckResult("reproducible", True, f"run_condition({condition!r}, {seed!r}) reproduces {recorded:.6g}.")


def check_seeds(results):
    """At least three seeds per condition, the same seeds in every condition."""
    problem = _results_problem(results)
    if problem:
        return CheckResult("seeds", False, problem)
    seeds = [set(by_seed) for by_seed in results.values()]
    if any(len(s) < 3 for s in seeds):
        return CheckResult("seeds", False, "expected at least 3 seeds per condition, got "
                           + ", ".join(f"{c!r}: {len(s)}" for c, s in zip(results, seeds))
                           + ": one seed cannot tell an effect from seed-to-seed spread.")
    if any(s != seeds[0] for s in seeds):
        return CheckResult("seeds", False, "expected the same seeds in every condition (paired runs), got "
                           + ", ".join(f"{c!r}: {sorted(s)}" for c, s in zip(results, seeds)) + ".")
    return CheckResult("seeds", True, f"{len(seeds[0])} paired seeds in each of {len(seeds)} conditions.")


def check_conclusion(conclusion, results):
    """A conclusion that quotes a condition's mean (to 2 decimals or 2 significant digits) and gives a verdict."""
    problem = _results_problem(results)
    if problem:
        return CheckResult("conclusion", False, problem)
    if not isinstance(conclusion, str) or len(conclusion.split()) < 12:
        return CheckResult("conclusion", False, "expected `conclusion` to be a few sentences (at least 12 words), "
                           f"got {conclusion!r:.80}.")
    means = [float(np.mean([float(v) for v in by_seed.values()])) for by_seed in results.values()]
    quoted = [float(m) for m in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", conclusion)]
    if not any(math.isclose(q, m, rel_tol=0.01, abs_tol=0.005) for q in quoted for m in means):
        return CheckResult("conclusion", False, "the conclusion quotes none of the conditions' mean values "
                           f"({', '.join(f'{m:.3g}' for m in means)}): print them and quote them, rounded, "
                           "with their spread.")
    if not any(w in conclusion.lower() for w in _VERDICTS):
        return CheckResult("conclusion", False, "say whether the measurements support or refute the hypothesis.")
    return CheckResult("conclusion", True, "quotes the measurements and gives a verdict.")


# ---- Chapter exercises, chapters 1-3 (keep this marker; add above the next one) ----


# ---- Chapter exercises, chapters 4-5 (keep this marker; add above the next one) ----


# ---- Chapter exercises, chapters 6-9 (keep this marker; add above the next one) ----


# ---- Problem-set checks (keep this marker; add below it) ----
