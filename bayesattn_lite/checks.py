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

# Added to every seed the checks draw their inputs with. 0 in the chapters, so a check's messages are
# the same on every run; the grader sets a fresh random offset in its own process for each submission,
# so a notebook cannot answer the public inputs of checks.py from a table.
SEED_OFFSET = 0


def _generator(seed):
    """The torch generator of the inputs numbered ``seed`` (shifted by SEED_OFFSET)."""
    return torch.Generator().manual_seed(SEED_OFFSET + seed)


def _rng(seed):
    """The numpy generator of the inputs numbered ``seed`` (shifted by SEED_OFFSET)."""
    return np.random.default_rng(SEED_OFFSET + seed)

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
    gen = _generator(seed + n)
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
        gen = _generator(100 + n)
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
        gen = _generator(200 + n)
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
# Checks of the assignments (book/assignments, bayesattn_lite.instructor.assignments). The same contract:
# take the learner's object, never raise, say what is wrong in words.

__all__ += ["check_predicted_attention_change", "check_e_step", "check_m_step_means", "check_settling_step",
            "check_hypothesis", "check_reproducible", "check_seeds", "check_conclusion"]
__all__ += [  # the chapters' exercises and the problem sets' questions
    "check_attended_gap", "check_score_kernel", "check_advantage_flow",
    "check_responsibilities_as_attention", "check_steps_to", "check_recall_posterior", "check_lstm_mixing",
    "check_biased_qk_gradients", "check_value_update_basis", "check_second_order_attention_change",
    "check_tempered_score_change", "check_markov_floors"
]


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
        gen = _generator(700 + n)
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
        gen = _generator(800 + n)
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
        gen = _generator(900 + n)
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
    """``run_condition(condition, seed)`` rerun for two (condition, seed) entries of ``results`` (drawn
    with the inputs' seed offset) gives the same numbers, and runs for a seed ``results`` does not have:
    a table of numbers with a lookup for ``run_condition`` is no experiment."""
    problem = _results_problem(results)
    if problem:
        return CheckResult("reproducible", False, problem)
    if not callable(run_condition):
        return CheckResult("reproducible", False, "expected `run_condition` to be a function (condition, seed) -> number.")
    entries = [(condition, seed) for condition, by_seed in results.items() for seed in by_seed]
    draw = np.random.default_rng(SEED_OFFSET)
    chosen = [entries[i] for i in sorted(draw.choice(len(entries), size=min(2, len(entries)), replace=False))]
    for condition, seed in chosen:
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
    problem = _not_an_experiment(run_condition, results)
    if problem:
        return CheckResult("reproducible", False, problem)
    return CheckResult("reproducible", True, "run_condition reproduces " + " and ".join(
        f"{results[c][s]:.6g} ({c!r}, seed {s!r})" for c, s in chosen) + ", and runs for a new seed.")


def _not_an_experiment(run_condition, results):
    """Why ``run_condition`` is not the experiment behind ``results`` (it fails for a seed that
    ``results`` does not have, drawn with the inputs' seed offset), or None."""
    entries = [(condition, seed) for condition, by_seed in results.items() for seed in by_seed]
    seeds = [seed for _, seed in entries]
    if not all(isinstance(seed, int) and not isinstance(seed, bool) for seed in seeds):
        return None
    condition = entries[0][0]
    fresh = max(seeds) + 1 + int(np.random.default_rng(SEED_OFFSET + 1).integers(1000))
    try:
        value = float(run_condition(condition, fresh))
    except Exception as exc:  # noqa: BLE001
        return (f"run_condition({condition!r}, {fresh}) (a seed `results` does not have) raised "
                f"{type(exc).__name__}: {str(exc)[:200]}: it should run the experiment for any seed, not read a table.")
    return None if math.isfinite(value) else f"run_condition({condition!r}, {fresh}) gave {value}."


def check_seeds(results, run_condition=None):
    """At least three seeds per condition, the same seeds in every condition; with ``run_condition``
    (the grader passes it), the numbers must come from it: it runs for a seed ``results`` lacks."""
    problem = _results_problem(results) or (run_condition is not None and _not_an_experiment(run_condition, results))
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

# ----------------------------------------------------------------------------- attended gap (chapter 1)

def _gap(inp, **knobs):
    """b_ij - E_alpha_i[b]: the score gradient of chapter 2 without its factor alpha (knobs of _ds)."""
    return _ds(inp, **{"weights": False, **knobs})


_GAP = _Output(
    "gap", ("T", "T"),
    "gap = b - (alpha * b).sum(dim=-1, keepdim=True), i.e. b_ij - sum_k alpha_ik b_ik",
    _gap,
    [
        _Flaw("mean", "none", "you returned b itself. The sign of b_ij is not the test: a query's attention sums "
              "to one, so attention given to v_j is taken from the other values, and what counts is b_ij minus "
              "the row's attended mean E_alpha[b] = sum_k alpha_ik b_ik."),
        _Flaw("sign", -1, "wrong sign: you returned E_alpha[b] - b_ij (that is the advantage of chapter 2, "
              "minus the gap). The gap is b_ij - E_alpha[b]: negative where more attention lowers the loss."),
        _Flaw("mean", "queries", "the mean is taken over the wrong axis: you summed alpha_ij b_ij over the "
              "queries i (dim 0). Query i's attended mean sums over its own row: "
              "(alpha * b).sum(dim=-1, keepdim=True)."),
        _Flaw("mean", "no_keepdim", "the mean broadcasts along the wrong axis: (alpha * b).sum(dim=-1) has shape "
              "(T,), which broadcasts as a row, so column j got the mean of row j. Keep the axis with "
              "keepdim=True so that row i subtracts its own E_alpha[b]."),
        _Flaw("mean", "unweighted", "the mean is not attention-weighted: you subtracted the plain average of b "
              "over the row. The output g_i is the alpha-weighted mixture, so the yardstick is "
              "sum_k alpha_ik b_ik = u_i . g_i."),
        _Flaw("weights", True, "you multiplied by alpha: alpha_ij (b_ij - E_alpha[b]) is dL/ds_ij (chapter 2). "
              "The gap is the bracket alone."),
    ],
)


def _attended_gap_spec():
    signature = {"alpha": ("T", "T"), "b": ("T", "T")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = _generator(1000 + n)
        scores = 2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)  # peaked rows: weighted != plain mean
        if _is_causal(n):
            scores = scores.masked_fill(~attention.causal_mask(T), float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        b = torch.randn(T, T, generator=gen, dtype=DTYPE)
        expected = b - (alpha * b).sum(dim=-1, keepdim=True)
        cases.append(_case(signature, {"alpha": alpha, "b": b}, [expected], _note(T, _is_causal(n))))
    hint = "alpha and b are (T, T), queries on the rows and positions on the columns."
    return _Spec("attended_gap", signature, [_GAP], cases, hint)


def check_attended_gap(fn):
    """Check ``fn(alpha, b) -> gap``, gap_ij = b_ij - E_alpha_i[b] with E_alpha_i[b] = sum_k alpha_ik b_ik."""
    return _run(_attended_gap_spec(), fn)


# ----------------------------------------------------------------------------- score kernel (chapter 3)

def _kernel(inp, scale="1/d_k", terms="both", pairing="right", layout="abij"):
    """K[i', j', i, j] = [(x_i . x_i')(k_j . k_j') + (x_j . x_j')(q_i . q_i')] / d_k, with knobs for slips."""
    x, q, k = inp["x"], inp["q"], inp["k"]
    d_k = q.shape[-1]
    xx, qq, kk = x @ x.T, q @ q.T, k @ k.T
    if pairing == "swapped":  # inputs of the queries with the queries, of the keys with the keys
        through_q = torch.einsum("ai,ai,bj->abij", xx, qq, torch.ones_like(kk))
        through_k = torch.einsum("bj,bj,ai->abij", xx, kk, torch.ones_like(qq))
    else:
        through_q = torch.einsum("ai,bj->abij", xx, kk)   # W_Q route: x_i . x_i' times k_j . k_j'
        through_k = torch.einsum("bj,ai->abij", xx, qq)   # W_K route: x_j . x_j' times q_i . q_i'
    K = {"both": through_q + through_k, "Q": through_q, "K": through_k}[terms]
    K = K * {"1/d_k": 1.0 / d_k, "1/sqrt(d_k)": d_k ** -0.5, "1": 1.0}[scale]
    return K.permute(0, 2, 1, 3) if layout == "aibj" else K


_KERNEL = _Output(
    "K", ("T", "T", "T", "T"),
    "K[i', j', i, j] = [(x_i . x_i')(k_j . k_j') + (x_j . x_j')(q_i . q_i')] / d_k, e.g. "
    "(einsum('ai,bj->abij', x @ x.T, k @ k.T) + einsum('bj,ai->abij', x @ x.T, q @ q.T)) / d_k",
    _kernel,
    [
        _Flaw("scale", "1/sqrt(d_k)", "divided by sqrt(d_k) instead of d_k: each score carries 1/sqrt(d_k), and "
              "K multiplies two score gradients (K = J J^T), so it carries 1/d_k."),
        _Flaw("scale", "1", "missing the 1/d_k: each score carries 1/sqrt(d_k), and K multiplies two score "
              "gradients (K = J J^T), so it carries 1/d_k."),
        _Flaw("terms", "Q", "only the W_Q route, (x_i . x_i')(k_j . k_j'): the step on W_K moves the scores too, "
              "which adds (x_j . x_j')(q_i . q_i')."),
        _Flaw("terms", "K", "only the W_K route, (x_j . x_j')(q_i . q_i'): the step on W_Q moves the scores too, "
              "which adds (x_i . x_i')(k_j . k_j')."),
        _Flaw("pairing", "swapped", "the factors are paired the wrong way: a step on W_Q moves query i' along the "
              "keys k_j of the pairs that push (scaled by x_i . x_i'), so the W_Q term is (x_i . x_i')(k_j . k_j'), "
              "not (x_i . x_i')(q_i . q_i'); likewise the W_K term is (x_j . x_j')(q_i . q_i')."),
        _Flaw("layout", "aibj", "the axes are in the wrong order: you returned K[i', i, j', j] (einsum output "
              "'aibj'). The layout is K[i', j', i, j]: first the pair whose score moves, then the pair whose "
              "gradient pushes (output 'abij')."),
    ],
    shape_hints={("T", "T"): "That is one (T, T) block: K has one entry per pair of pairs, shape (T, T, T, T)."},
)


def _score_kernel_spec():
    signature = {"x": ("T", "d_x"), "q": ("T", "d_k"), "k": ("T", "d_k")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        x, _, params = _random_problem(n, seed=1100)
        inputs = {"x": x, "q": x @ params["W_Q"].T, "k": x @ params["W_K"].T}
        cases.append(_case(signature, inputs, [attention.score_kernel(**inputs)], _note(T)))
    hint = ("x is (T, d_x), q and k are (T, d_k): x @ x.T, q @ q.T and k @ k.T are the (T, T) tables of dot "
            "products, and torch.einsum('ai,bj->abij', ...) combines two of them into a (T, T, T, T) tensor.")
    return _Spec("score_kernel", signature, [_KERNEL], cases, hint)


def check_score_kernel(fn):
    """Check ``fn(x, q, k) -> K`` (T, T, T, T), K[i', j', i, j] = [(x_i . x_i')(k_j . k_j') + (x_j . x_j')(q_i . q_i')]/d_k."""
    return _run(_score_kernel_spec(), fn)


# ---- Chapter exercises, chapters 4-5 (keep this marker; add above the next one) ----

# ----------------------------------------------------------------------------- advantage flow (chapter 4)

def _flow(inp, weights=True, masked=True, axis=-1, sign=1):
    alpha, advantage, key_mask = inp["alpha"], inp["advantage"], inp["key_mask"]
    terms = alpha * advantage if weights else advantage
    if masked:
        terms = terms * key_mask.to(DTYPE)[None, :]
    return sign * terms.sum(dim=axis)


_FLOW = _Output(
    "flow", ("T",),
    "flow_i = sum over the keys j of the set of alpha_ij A_ij, i.e. (alpha * advantage * key_mask).sum(dim=-1)",
    _flow,
    [_Flaw("sign", -1, "wrong sign: the flow is -dL/dc = +sum_{j in set} alpha_ij A_ij, positive when gradient "
                       "descent raises the set's scores together (a positive advantage raises a score)."),
     _Flaw("weights", False, "the attention weights are missing: you summed A_ij alone. Raising every score of "
                             "the set by c changes the loss through each score's gradient dL/ds_ij = -alpha_ij A_ij, "
                             "so the flow is sum_{j in set} alpha_ij A_ij."),
     _Flaw("masked", False, "you summed over every key the query sees, not over the set: that sum, "
                            "sum_j alpha_ij A_ij, is exactly 0 for every query (the advantages of a row average "
                            "to zero under alpha: raising all scores of a row together changes nothing). "
                            "Multiply by key_mask before summing."),
     _Flaw("axis", 0, "summed over the wrong axis: you added up a column (the queries i that look at a key). "
                      "The flow of query i sums its own row over the keys of the set: .sum(dim=-1).")],
    shape_hints={("T", "T"): "One number per query: sum the (T, T) terms over the keys (dim=-1)."},
)


def _advantage_flow_spec():
    signature = {"alpha": ("T", "T"), "advantage": ("T", "T"), "key_mask": ("T",)}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = _generator(1100 + n)
        scores = 2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)
        if _is_causal(n):
            scores = scores.masked_fill(~attention.causal_mask(T), float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        _, advantage = attention.score_gradient(alpha, torch.randn(T, T, generator=gen, dtype=DTYPE))
        advantage = advantage.masked_fill(alpha == 0, 0.0)
        key_mask = torch.rand(T, generator=gen) < 0.4
        key_mask[n % T] = True  # never an empty set
        inputs = {"alpha": alpha, "advantage": advantage, "key_mask": key_mask}
        expected = diagnostics.advantage_flow(alpha, advantage, key_mask)
        cases.append(_case(signature, inputs, [expected], _note(T, _is_causal(n))))
    return _Spec("advantage_flow", signature, [_FLOW], cases,
                 "alpha and advantage are (T, T), queries on the rows; key_mask is (T,), one flag per key.")


def check_advantage_flow(fn):
    """Check ``fn(alpha, advantage, key_mask) -> flow`` (T,): sum over the keys j with key_mask_j of
    alpha_ij A_ij, the advantage law summed over a set of keys (``diagnostics.advantage_flow``)."""
    return _run(_advantage_flow_spec(), fn)


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


_RESP_ATTENTION = _Output(
    "resp", ("n", "K"),
    "resp_ik = softmax_k(q_i . kappa_k + beta_k), q_i = x_i / sigma, kappa_k = mu_k / sigma, "
    "beta_k = log pi_k - ||mu_k||^2 / (2 sigma^2)",
    _resp_attention,
    [_Flaw("bias", "none", "the bias beta_k is missing: softmax(x_i . mu_k / sigma^2) alone. Expanding "
                           "-||x_i - mu_k||^2 / (2 sigma^2) leaves -||mu_k||^2 / (2 sigma^2), which differs between "
                           "components, and the prior adds log pi_k: beta_k = log pi_k - ||mu_k||^2 / (2 sigma^2)."),
     _Flaw("bias", "prior", "the term -||mu_k||^2 / (2 sigma^2) is missing from the bias. Only ||x_i||^2 cancels in "
                            "the normalisation (it is the same for every k); ||mu_k||^2 differs between components."),
     _Flaw("bias", "norm", "log pi_k is missing from the bias: the E-step weighs each Gaussian by its mixing weight, "
                           "pi_k N(x_i; mu_k, sigma^2 I), and in the logits that is + log pi_k."),
     _Flaw("scale", "sigma", "divided by sigma where the formula has sigma^2: q_i . kappa_k = (x_i / sigma) . "
                             "(mu_k / sigma) = x_i . mu_k / sigma^2, and the same sigma^2 divides ||mu_k||^2 / 2. "
                             "`variance` is sigma^2 already."),
     _Flaw("axis", 0, "softmax over the wrong axis: each point's responsibilities are a distribution over the "
                      "K components (dim=1), as each query's attention is a distribution over its keys.")],
    transpose_hint="Transposed: one row per point (a query), one column per component (a key).",
)


def _responsibilities_spec():
    signature = {"x": ("n", "d"), "means": ("K", "d"), "variance": (), "weights": ("K",)}
    cases = []
    for n, (n_points, d, K) in enumerate([(7, 3, 2), (9, 4, 5), (6, 5, 3), (11, 2, 4)]):
        gen = _generator(1200 + n)
        means = torch.randn(K, d, generator=gen, dtype=DTYPE) * torch.linspace(0.5, 2.0, K, dtype=DTYPE)[:, None]
        inputs = {"x": 1.5 * torch.randn(n_points, d, generator=gen, dtype=DTYPE), "means": means,
                  "variance": torch.tensor(0.4 + 0.5 * n, dtype=DTYPE),
                  "weights": torch.softmax(torch.randn(K, generator=gen, dtype=DTYPE), 0)}
        expected = em.e_step(inputs["x"], means, float(inputs["variance"]), inputs["weights"])[0]
        cases.append(_case(signature, inputs, [expected], f"n={n_points}, K={K}"))
    return _Spec("responsibilities_as_attention", signature, [_RESP_ATTENTION], cases,
                 "x is (n, d) and means (K, d): x @ means.T gives the (n, K) dot products.")


def check_responsibilities_as_attention(fn):
    """Check ``fn(x, means, variance, weights) -> resp`` (n, K): the E-step of a spherical Gaussian
    mixture written as attention, softmax_k(x_i . mu_k / sigma^2 - ||mu_k||^2 / (2 sigma^2) + log pi_k)."""
    return _run(_responsibilities_spec(), fn)


# ---- Chapter exercises, chapters 6-9 (keep this marker; add above the next one) ----

# ----------------------------------------------------------------------------- chapters 6-9: helpers

def _as_array(got, shape, name):
    """The learner's answer as a float64 numpy array of ``shape``, or (None, a sentence saying why not)."""
    if isinstance(got, torch.Tensor):
        got = got.detach().cpu().double().numpy()
    if got is None or isinstance(got, str):
        return None, f"{name}: expected numbers of shape {tuple(shape)}, got {_type_name(got)}."
    try:
        array = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return None, f"{name}: expected numbers of shape {shape}, got {_type_name(got)}."
    if array.shape != tuple(shape):
        return None, f"{name}: expected shape {tuple(shape)}, got {array.shape}."
    return array, None


def _same(a, b, rtol=1e-6, atol=1e-9):
    """Equal up to rounding, with nan equal to nan (a missing answer must be missing in both)."""
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))


def _verdict_by_mistakes(name, fn, cases, arguments, shape, reference, mistakes, formula):
    """Call ``fn`` on every case (``_answers``). Pass if every answer matches ``reference(case)``; else
    name the first mistake (a function of the case, and what it means) that reproduces every answer,
    else point to the first difference."""
    answers, failed = _answers(name, fn, cases, arguments, shape)
    if failed is not None:  # a failed CheckResult is falsy
        return failed
    if all(_same(a, reference(c)) for a, c in zip(answers, cases)):
        return CheckResult(name, True, f"matches the reference on {len(cases)} problems.")
    for compute, words in mistakes:
        if all(_same(a, compute(c)) for a, c in zip(answers, cases)):
            return CheckResult(name, False, words)
    n = next(n for n, (a, c) in enumerate(zip(answers, cases)) if not _same(a, reference(c)))
    right = reference(cases[n])
    index = tuple(int(i) for i in np.argwhere(~np.isclose(answers[n], right, rtol=1e-6, atol=1e-9, equal_nan=True))[0])
    return CheckResult(name, False, (
        f"on problem {n + 1} of {len(cases)} ({cases[n]['about']}) you returned {answers[n][index]:.6g} at index "
        f"{index}, the reference is {right[index]:.6g}. Compare with {formula}."))


def _answers(name, fn, cases, arguments, shape):
    """Call ``fn`` on every case; (answers, None) or (None, a failed CheckResult)."""
    answers = []
    for case in cases:
        try:
            got = fn(*(np.array(case[a], copy=True) if isinstance(case[a], np.ndarray) else case[a] for a in arguments))
        except Exception as exc:  # noqa: BLE001 - a verdict, never a traceback
            return None, CheckResult(name, False, f"your function raised {type(exc).__name__}: "
                                     f"{str(exc).strip()[:200]} (on {case['about']}).")
        array, problem = _as_array(got, shape(case), "the result")
        if problem:
            return None, CheckResult(name, False, f"{problem} (on {case['about']})")
        answers.append(array)
    return answers, None


# ----------------------------------------------------------------------------- steps to a loss (chapter 6)

def _steps_to(case, strict=False, final=True, never=np.nan, shift=0):
    curve, last, threshold = case["curve"], case["final"], case["threshold"]
    losses = np.concatenate([curve, last[:, None]], axis=1) if final else curve
    hit = losses < threshold[:, None] if strict else losses <= threshold[:, None] * (1 + 1e-6)
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + shift, never).astype(float)


def _steps_to_cases():
    rng = _rng(600)
    cases = []
    for n, (S, steps) in enumerate([(3, 12), (4, 20), (2, 9)]):
        rate = rng.uniform(0.05, 0.4, size=(S, 1))
        curve = 2.0 * np.exp(-rate * np.arange(steps)) + 0.5  # after 0..steps-1 updates
        final = 2.0 * np.exp(-rate[:, 0] * steps) + 0.5
        threshold = curve[np.arange(S), rng.integers(1, steps, size=S)].copy()
        threshold[0] = final[0]                       # reached only after the last update, exactly
        if S > 2:
            threshold[-1] = final[-1] - 0.1           # never reached
        cases.append({"curve": curve, "final": final, "threshold": threshold,
                      "about": f"{S} seeds, {steps} steps: one reaches the threshold only after its last update"
                               + (", one never does" if S > 2 else "")})
    return cases


def check_steps_to(fn):
    """Check ``fn(curve, final, threshold) -> steps_to`` (S,): per seed the first number of updates t
    after which the loss is <= threshold, nan if never (``experiments.first_step_at_or_below``).
    ``curve`` (S, steps) is the loss after t = 0..steps-1 updates, ``final`` (S,) after all of them."""
    name = "steps_to"
    cases = _steps_to_cases()
    mistakes = [
        (lambda c: _steps_to(c, never=0), "a seed that never reaches the threshold gets 0 instead of nan: argmax of an "
         "all-False row is 0. Check hit.any(axis=1) first and return nan where it is False."),
        (lambda c: _steps_to(c, shift=1), "off by one: curve[:, t] is the loss after t updates (t = 0 is the start), "
         "so the first index at or below the threshold is already the number of updates; do not add 1."),
        (lambda c: _steps_to(c, final=False), "the final loss is missing: a run that reaches the threshold only with "
         "its last update gets nan. Append final as column `steps` of the curve (the loss after all updates)."),
        (lambda c: _steps_to(c, strict=True), "strictly below: the threshold is 'at or below' (<=). With <, a schedule "
         "never reaches its own final loss, and two identical schedules give no speed-up of 1."),
    ]
    return _verdict_by_mistakes(name, fn, cases, ("curve", "final", "threshold"), lambda c: c["final"].shape,
                                _steps_to, mistakes,
                                "experiments.first_step_at_or_below: the first t with loss <= threshold, nan if none")


# ----------------------------------------------------------------------------- recall posterior (chapter 7)

def _recall_posterior(case, split=True, normalise=True, others=True):
    counts, noise = case["counts"], case["noise"]
    M, n = len(counts), counts.sum()
    wrong = noise / (M - 1) if split else noise
    p = (1 - noise) ** counts * (wrong ** (n - counts) if others else 1.0)
    return p / p.sum() if normalise else p


def _recall_cases():
    rng = _rng(700)
    cases = []
    for n, (M, shown, noise) in enumerate([(6, 3, 0.2), (4, 0, 0.1), (8, 5, 0.3), (5, 4, 0.05)]):
        counts = np.bincount(rng.integers(0, M, size=shown), minlength=M).astype(float)
        cases.append({"counts": counts, "noise": noise,
                      "about": f"M = {M} values, shown {shown} times, noise {noise}: counts {counts.astype(int).tolist()}"})
    return cases


def check_recall_posterior(fn):
    """Check ``fn(counts, noise) -> p`` (M,): the recall posterior of one key whose earlier pairs showed
    value v ``counts[v]`` times, p(v) proportional to (1 - noise)^c_v (noise / (M - 1))^(n - c_v)."""
    name = "recall_posterior"
    cases = _recall_cases()
    mistakes = [
        (lambda c: _recall_posterior(c, split=False), "a wrong showing has probability noise / (M - 1), not noise: "
         "the noise is spread uniformly over the M - 1 other values."),
        (lambda c: _recall_posterior(c, normalise=False), "not normalised: divide by the sum over the M values so "
         "that the posterior sums to 1."),
        (lambda c: _recall_posterior(c, others=False), "the showings of *other* values are missing: every showing "
         "of a value other than v multiplies p(v) by noise / (M - 1), so p(v) ~ (1 - noise)^c_v (noise / (M - 1))^(n - c_v)."),
    ]
    return _verdict_by_mistakes(name, fn, cases, ("counts", "noise"), lambda c: c["counts"].shape,
                                _recall_posterior, mistakes,
                                "p(v) ~ (1 - noise)^c_v (noise / (M - 1))^(n - c_v), normalised over v")


# ----------------------------------------------------------------------------- LSTM mixing weights (chapter 8)

def _lstm_mixing(case, first=1, last=0, input_gate=True, causal=True, transpose=False):
    f, i = case["f"], case["i"]
    T = len(f)
    omega = np.zeros((T, T))
    for t in range(T):
        for s in range(t + 1):
            omega[t, s] = np.prod(f[s + first:t + 1 - last]) * (i[s] if input_gate else 1.0)
        for s in range(t + 1, T if not causal else 0):  # a cumulative-product ratio P_t / P_s, unmasked
            omega[t, s] = i[s] / np.prod(f[t + 1:s + 1])
    return omega.T if transpose else omega


def _lstm_cases():
    rng = _rng(800)
    return [{"f": rng.uniform(0.2, 0.95, T), "i": rng.uniform(0.1, 0.9, T), "about": f"T = {T}"} for T in (4, 6, 7)]


def check_lstm_mixing(fn):
    """Check ``fn(f, i) -> omega`` (T, T): the mixing weights of one LSTM channel, the cell state
    c_t = sum_s omega_ts c~_s with omega_ts = i_s prod_{r=s+1}^{t} f_r for s <= t, and 0 for s > t."""
    name = "lstm_mixing"
    cases = _lstm_cases()
    mistakes = [
        (lambda c: _lstm_mixing(c, first=0), "the product of forget gates starts one step early: c_s = f_s c_{s-1} + "
         "i_s c~_s, so c~_s is forgotten by f_{s+1}, ..., f_t, not by f_s."),
        (lambda c: _lstm_mixing(c, last=1), "the reader's own forget gate f_t is missing: the product runs up to r = t "
         "(it is the factor every source shares, which is why the ratio of two weights does not see x_t)."),
        (lambda c: _lstm_mixing(c, input_gate=False), "the input gate is missing: the source enters the cell state as "
         "i_s c~_s, so omega_ts carries a factor i_s."),
        (lambda c: _lstm_mixing(c, transpose=True), "transposed: the rows are the readers t, the columns the sources s "
         "(omega[t, s], zero above the diagonal)."),
        (lambda c: _lstm_mixing(c, causal=False), "not causal: a source after the reader (s > t) has weight 0."),
    ]
    return _verdict_by_mistakes(name, fn, cases, ("f", "i"), lambda c: (len(c["f"]), len(c["f"])),
                                _lstm_mixing, mistakes,
                                "omega[t, s] = i[s] * prod(f[s+1 : t+1]) for s <= t, 0 above the diagonal")


# ---- Problem-set checks (keep this marker; add below it) ----

# ----------------------------------------------------------------------------- problem set 1: temperature and ALiBi

def _biased_alpha(inp, tau_in_softmax=True, bias_sign=1, bias=True, causal=True, sqrt=True):
    """alpha_ij = softmax_j(q_i . k_j / (tau sqrt(d_k)) - m (i - j)) over j <= i (an ALiBi head)."""
    q, k, tau, slope = inp["q"], inp["k"], inp["tau"], inp["slope"]
    T, d_k = q.shape
    scale = (tau if tau_in_softmax else 1.0) * (math.sqrt(d_k) if sqrt else 1.0)
    distance = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).to(q.dtype)  # i - j
    s = q @ k.T / scale - (bias_sign * slope * distance if bias else 0.0)
    if causal:
        s = s.masked_fill(~attention.causal_mask(T), float("-inf"))
    return torch.softmax(s, dim=-1)


def _biased_qk(inp, which, sign=1, tau_in_softmax=True, tau_in_chain=True, bias_sign=1, bias=True, causal=True,
               sqrt=True):
    alpha = _biased_alpha(inp, tau_in_softmax, bias_sign, bias, causal, sqrt)
    b = inp["u"] @ inp["v"].T  # b_ij = u_i . v_j
    ds = alpha * (b - (alpha * b).sum(-1, keepdim=True))  # dL/ds: the advantage law, bias or not
    q, k = inp["q"], inp["k"]
    scale = (inp["tau"] if tau_in_chain else 1.0) * (math.sqrt(q.shape[1]) if sqrt else 1.0)
    return sign * (ds @ k if which == "q" else ds.T @ q) / scale


def _biased_flaws():
    return [
        _Flaw("sign", -1, "wrong sign: dL/ds_ij = alpha_ij (b_ij - E_alpha_i[b]) with b_ij = u_i . v_j "
                          "(the advantage law with A = E[b] - b: dL/ds = -alpha A)."),
        _Flaw("tau_in_softmax", False, "the temperature is missing from the attention weights: alpha is the "
                                       "softmax of q.k / (tau sqrt(d_k)) - m (i - j), not of q.k / sqrt(d_k)."),
        _Flaw("tau_in_chain", False, "the chain rule through the score lost its 1/tau: ds_ij/dq_i = "
                                     "k_j / (tau sqrt(d_k)), so dq = dL/ds @ k / (tau sqrt(d_k)). "
                                     "The temperature is in alpha *and* in the derivative of the score."),
        _Flaw("bias_sign", -1, "the ALiBi bias has the wrong sign: it *penalises* distance, "
                               "s_ij = ... - m (i - j) with i - j >= 0, so far keys get less attention."),
        _Flaw("bias", False, "the positional bias is missing from alpha. The bias does not depend on q or k, "
                             "so it has no derivative of its own, but it changes alpha, hence every gradient."),
        _Flaw("causal", False, "no causal mask: query i attends only to keys j <= i (ALiBi heads are causal). "
                               "Set the scores above the diagonal to -inf before the softmax."),
        _Flaw("sqrt", False, "the 1/sqrt(d_k) is missing (in alpha and in the chain rule)."),
    ]


_BIASED_Q = _Output("dq", ("T", "d_k"), "dq = dL/ds @ k / (tau sqrt(d_k)), dL/ds = alpha (b - E_alpha[b]), "
                    "alpha = softmax(q k^T / (tau sqrt(d_k)) - m (i - j)) over j <= i",
                    lambda inp, **kn: _biased_qk(inp, "q", **kn), _biased_flaws())
_BIASED_K = _Output("dk", ("T", "d_k"), "dk = (dL/ds)^T @ q / (tau sqrt(d_k)) (the transpose: key j collects "
                    "from every query i)", lambda inp, **kn: _biased_qk(inp, "k", **kn), _biased_flaws())


def _biased_spec():
    signature = {"q": ("T", "d_k"), "k": ("T", "d_k"), "v": ("T", "d_v"), "u": ("T", "d_v"), "tau": (),
                 "slope": ()}
    taus, slopes = (0.5, 2.0, 1.5, 3.0, 0.7), (0.25, 0.5, 1.0, 0.125, 0.75)
    cases = []
    for n, (T, _d_x, d_k, d_v, _c) in enumerate(SIZES):
        gen = _generator(1500 + n)
        inputs = {"q": 1.5 * torch.randn(T, d_k, generator=gen, dtype=DTYPE),
                  "k": 1.5 * torch.randn(T, d_k, generator=gen, dtype=DTYPE),
                  "v": torch.randn(T, d_v, generator=gen, dtype=DTYPE),
                  "u": torch.randn(T, d_v, generator=gen, dtype=DTYPE),
                  "tau": torch.tensor(taus[n], dtype=DTYPE), "slope": torch.tensor(slopes[n], dtype=DTYPE)}
        expected = [_biased_qk(inputs, "q"), _biased_qk(inputs, "k")]
        cases.append(_case(signature, inputs, expected, f"T={T}, tau={taus[n]}, m={slopes[n]}"))
    return _Spec("biased_qk_gradients", signature, [_BIASED_Q, _BIASED_K], cases,
                 "q, k are (T, d_k), v, u (T, d_v); tau and slope are numbers (0-d tensors).")


def check_biased_qk_gradients(fn):
    """Check ``fn(q, k, v, u, tau, slope) -> (dq, dk)`` for a causal head with a temperature and an ALiBi
    bias, s_ij = q_i . k_j / (tau sqrt(d_k)) - slope (i - j), and the error signal u = dL/dg."""
    return _run(_biased_spec(), fn)


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
        gen = _generator(1600 + n)
        cases.append(torch.randn(C, d_v, generator=gen, dtype=DTYPE))
    return cases


def _value_gradient_columns(W_O, seed):
    """dW_V of a random head with this W_O (stored (C, d_v)): its columns must lie in the subspace."""
    C, d_v = W_O.shape
    gen = _generator(seed)
    T, d_x, d_k = 6, 3, 2
    params = attention.init_params(d_x, d_k, d_v, C, std=0.7, seed=seed, dtype=DTYPE)
    params["W_O"] = W_O
    x = torch.randn(T, d_x, generator=gen, dtype=DTYPE)
    y = torch.randint(0, C, (T,), generator=gen)
    return attention.gradients(x, y, params)["W_V"]


def check_value_update_basis(fn):
    """Check ``fn(W_O) -> B``: an orthonormal basis (d_v, C - 1), as columns, of the subspace that holds every
    column of dW_V after one step, {W_O^T r : r_1 + ... + r_C = 0} (W_O stored (C, d_v))."""
    name = "value_update_basis"
    for n, W_O in enumerate(_value_basis_cases()):
        C, d_v = W_O.shape
        where = f"(input {n + 1}: W_O of shape ({C}, {d_v}) = (C, d_v))"
        try:
            got = fn(W_O.clone())
        except Exception as exc:  # noqa: BLE001 - a verdict, never a traceback
            return CheckResult(name, False, f"your function raised {type(exc).__name__}: {str(exc)[:200]} {where}. "
                               "W_O is stored (C, d_v) as nn.Linear stores it; return (d_v, C - 1).")
        if isinstance(got, np.ndarray) and got.dtype.kind in "biuf":
            got = torch.from_numpy(got)
        if not isinstance(got, torch.Tensor):
            return CheckResult(name, False, f"expected a tensor of shape ({d_v}, {C - 1}) = (d_v, C - 1), got "
                               f"{_type_name(got)} {where}.")
        got = got.detach().to(DTYPE).cpu()
        shape = tuple(got.shape)
        if shape == (d_v, C):
            return CheckResult(name, False, (
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
                return CheckResult(name, False, (
                    f"your columns span the top C - 1 singular directions of W_O^T {where}, not the image of the "
                    "zero-sum vectors: the step reaches W_O^T r only for r with sum_c r_c = 0, so centre first "
                    "(W_O^T (I - 11^T/C)) and then orthonormalise."))
            dW_V = _value_gradient_columns(W_O, seed=1700 + n)
            outside = dW_V - got @ (got.T @ dW_V)
            return CheckResult(name, False, (
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


_SECOND = _Output(
    "second_order", ("T", "T"),
    "1/2 alpha_ij [c_ij^2 - sum_k alpha_ik c_ik^2] with c_ij = delta_ij - sum_k alpha_ik delta_ik",
    _second_order,
    [_Flaw("sign", -1, "wrong sign: the second-order term of softmax(s + delta) is +1/2 alpha (c^2 - Var)."),
     _Flaw("half", False, "the 1/2 of the Taylor expansion exp(delta) = 1 + delta + delta^2/2 + ... is missing."),
     _Flaw("centre", False, "the square is not centred: the expansion of exp(delta_j) / sum_k alpha_k exp(delta_k) "
                            "gives (delta_ij - E_alpha[delta])^2, not delta_ij^2 (the denominator contributes "
                            "E[delta]^2 and the cross term)."),
     _Flaw("variance", False, "your rows do not sum to 0: subtract alpha_ij Var_alpha_i(delta) = alpha_ij sum_k "
                              "alpha_ik c_ik^2. Every row of softmax sums to 1 at every order, so each order's "
                              "term sums to 0."),
     _Flaw("total", True, "you returned the first- plus the second-order change: return only the delta^2 term "
                          "(the first-order part alpha_ij c_ij is the advantage law's prediction).")],
    transpose_hint="Transposed: queries are the rows. Keep alpha's layout.",
)


def _second_order_spec():
    signature = {"alpha": ("T", "T"), "delta_s": ("T", "T")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = _generator(1800 + n)
        scores = 2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)
        if _is_causal(n):
            scores = scores.masked_fill(~attention.causal_mask(T), float("-inf"))
        alpha = torch.softmax(scores, dim=-1)
        delta = torch.randn(T, T, generator=gen, dtype=DTYPE).masked_fill(alpha == 0, 0.0)
        inputs = {"alpha": alpha, "delta_s": delta}
        cases.append(_case(signature, inputs, [_second_order(inputs)], _note(T, _is_causal(n))))
    return _Spec("second_order_attention_change", signature, [_SECOND], cases,
                 "alpha and delta_s are (T, T), queries on the rows.")


def check_second_order_attention_change(fn):
    """Check ``fn(alpha, delta_s) -> (T, T)``: the second-order term of softmax(s + delta_s) - softmax(s),
    1/2 alpha (c^2 - Var_alpha(delta)) with c = delta - E_alpha[delta], row by row."""
    return _run(_second_order_spec(), fn)


# ----------------------------------------------------------------------------- problem set 2: tempered score kernel

def _tempered_change(inp, sign=1, tau_power=2, dk_power=1.0, route="both", exact=False):
    """First-order Delta s of one step of size eta on W_Q and W_K, s = q . k / (tau sqrt(d_k))."""
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


_TEMPERED = _Output(
    "delta_s", ("T", "T"),
    "Delta s_{i'j'} = -eta / tau^2 sum_ij K[i', j', i, j] dL/ds_ij, K = [(x_i.x_i')(k_j.k_j') + "
    "(x_j.x_j')(q_i.q_i')] / d_k",
    _tempered_change,
    [_Flaw("sign", -1, "wrong sign: a gradient *descent* step, W <- W - eta dL/dW."),
     _Flaw("tau_power", 1, "the temperature appears once; it appears twice: once in dL/dW_Q (the chain rule "
                           "through s) and once when the moved weights move s, so the kernel scales as 1/tau^2."),
     _Flaw("tau_power", 0, "the temperature is missing: s = q.k / (tau sqrt(d_k)) puts 1/tau in dL/dW and "
                           "again in Delta s, a factor 1/tau^2 in all."),
     _Flaw("dk_power", 0.5, "the 1/sqrt(d_k) appears once; like the temperature it appears twice (in dL/dW and "
                            "in Delta s), so the kernel has 1/d_k."),
     _Flaw("route", "Q", "only the W_Q route: the step moves W_K too, adding (x_j.x_j')(q_i.q_i') / d_k."),
     _Flaw("route", "K", "only the W_K route: the step moves W_Q too, adding (x_i.x_i')(k_j.k_j') / d_k."),
     _Flaw("exact", True, "you computed the exact change of the scores, which includes the second-order term "
                          "Delta q . Delta k (order eta^2): return the first-order (linear in eta) change only.")],
)


def _tempered_spec():
    signature = {"x": ("T", "d_x"), "W_Q": ("d_k", "d_x"), "W_K": ("d_k", "d_x"), "ds": ("T", "T"), "eta": (),
                 "tau": ()}
    taus = (0.5, 2.0, 1.5, 3.0, 0.7)
    cases = []
    for n, (T, d_x, d_k, _d_v, _c) in enumerate(SIZES):
        gen = _generator(1900 + n)
        alpha = torch.softmax((2.0 * torch.randn(T, T, generator=gen, dtype=DTYPE)).masked_fill(
            ~attention.causal_mask(T), float("-inf")), dim=-1)
        ds, _ = attention.score_gradient(alpha, torch.randn(T, T, generator=gen, dtype=DTYPE))
        inputs = {"x": torch.randn(T, d_x, generator=gen, dtype=DTYPE),
                  "W_Q": torch.randn(d_k, d_x, generator=gen, dtype=DTYPE),
                  "W_K": torch.randn(d_k, d_x, generator=gen, dtype=DTYPE),
                  "ds": ds, "eta": torch.tensor(0.3 + 0.2 * n, dtype=DTYPE), "tau": torch.tensor(taus[n], dtype=DTYPE)}
        cases.append(_case(signature, inputs, [_tempered_change(inputs)], f"T={T}, tau={taus[n]}"))
    return _Spec("tempered_score_change", signature, [_TEMPERED], cases,
                 "x is (T, d_x), W_Q and W_K (d_k, d_x) as nn.Linear stores them, ds (T, T); eta, tau numbers.")


def check_tempered_score_change(fn):
    """Check ``fn(x, W_Q, W_K, ds, eta, tau) -> (T, T)``: the first-order change of the scores
    s = q . k / (tau sqrt(d_k)) after one gradient step of size eta on W_Q and W_K (ds = dL/ds)."""
    return _run(_tempered_spec(), fn)


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


_FLOOR_FLAWS = [
    ("log", 1.0, "you answered in nats: divide by ln 2 for bits."),
    ("weights", "uniform", "the entropy rate weights each row by the stationary probability of its state, "
                           "sum_i pi_i H(P_i), not by 1/n (that is the paper's h_min, right only when pi is uniform). "
                           "If you solved P pi = pi, you found the all-ones vector: rows of P are 'from' states, "
                           "so pi is the *left* eigenvector, pi P = pi (an eigenvector of P^T)."),
    ("shuffled", "uniform", "the shuffled sequence keeps each symbol's frequency: its floor is H(pi), "
                            "not log2(n) (that would be a uniform distribution)."),
    ("shuffled", "mean_row", "the frequencies of a shuffled sequence are the stationary pi, not the average row "
                             "of P (they agree only when P is doubly stochastic)."),
]


def _markov_cases():
    cases = []
    for n, size in enumerate((3, 4, 5, 6)):
        rng = _rng(2000 + n)
        P = rng.dirichlet(np.full(size, 0.6), size=size)
        P += np.eye(size) * (0.5 + 0.1 * n)  # sticky, so the two floors differ clearly
        cases.append(P / P.sum(axis=1, keepdims=True))
    return cases


def check_markov_floors(fn):
    """Check ``fn(P) -> (rate_bits, shuffled_bits)`` for a transition matrix P (n, n), rows 'from' states: the
    entropy rate sum_i pi_i H(P_i) and the entropy H(pi) of the stationary distribution, both in bits."""
    name = "markov_floors"
    answers = []
    cases = _markov_cases()
    for n, P in enumerate(cases):
        try:
            got = fn(torch.from_numpy(P.copy()))
            got = tuple(float(g) for g in got)
        except Exception as exc:  # noqa: BLE001 - a verdict, never a traceback
            return CheckResult(name, False, f"on a {P.shape[0]}-state chain your function raised or did not return "
                               f"two numbers: {type(exc).__name__}: {str(exc)[:200]}. Return (rate_bits, "
                               "shuffled_bits), two floats (or 0-d tensors).")
        if len(got) != 2 or not all(math.isfinite(g) for g in got):
            return CheckResult(name, False, f"expected two finite numbers (rate_bits, shuffled_bits), got {got!r}.")
        answers.append(got)
    expected = [_floors(P) for P in cases]
    labels = ("The entropy rate", "The shuffled floor")
    wrong = []
    for i, label in enumerate(labels):
        if all(math.isclose(a[i], e[i], rel_tol=1e-6, abs_tol=1e-9) for a, e in zip(answers, expected)):
            continue
        reason = next((words for knob, value, words in _FLOOR_FLAWS
                       if all(math.isclose(a[i], _floors(P, **{knob: value})[i], rel_tol=1e-6, abs_tol=1e-9)
                              for a, P in zip(answers, cases))), None)
        if reason is None and all(math.isclose(a[i], _floors(P, weights="uniform", log=1.0)[i], rel_tol=1e-6)
                                  for a, P in zip(answers, cases)):
            reason = "two mistakes: uniform weights instead of the stationary pi, and nats instead of bits."
        if reason is None:
            P, a, e = cases[0], answers[0], expected[0]
            reason = (f"on the {P.shape[0]}-state chain you returned {a[i]:.6g} bits, the reference is {e[i]:.6g}. "
                      "Compare with rate = sum_i pi_i H(P_i), shuffled = H(pi), pi P = pi, in bits.")
        wrong.append(f"{label} is wrong: {reason}")
    if wrong:
        return CheckResult(name, False, " ".join(wrong))
    return CheckResult(name, True, f"both floors match the reference on {len(cases)} random sticky chains.")
