"""Checks of the exercises of chapters 1-3: the error signal, the score gradient and the attended gap,
the gradients of q, k, v and of the projections, the score-space kernel."""

import torch

from .. import attention
from ._engine import DTYPE, SIZES, Flaw, Output, Spec, generator, input_note, is_causal, make_case, peaked_attention, run


# ----------------------------------------------------------------------------- error signal

def _u(inp, sign=1, axis=-1, target=True, log=False, mean=True):
    logits, y, W_O = inp["logits"], inp["y"], inp["W_O"]
    probs = (torch.log_softmax if log else torch.softmax)(logits, dim=axis)
    if target:
        probs = probs - torch.nn.functional.one_hot(y.long(), logits.shape[-1]).to(DTYPE)
    T = logits.shape[0]
    return (sign * probs / (T if mean else 1)) @ W_O


_U_FLAWS = [
    Flaw("sign", -1, "wrong sign: you computed W_O^T (onehot(y_i) - softmax(z_i)) / T. The gradient of "
         "the cross-entropy with respect to the logits is prediction minus target, softmax(z_i) - onehot(y_i)."),
    Flaw("axis", 0, "softmax over the wrong axis: you normalised each class over the T positions (dim 0). "
         "The probabilities of position i are a softmax over the classes of its own logits z_i: "
         "torch.softmax(logits, dim=-1)."),
    Flaw("mean", False, "missing the 1/T averaging: your u is T times too large (the gradient of the sum of "
         "the cross-entropies). L is the mean over the T positions, so u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T."),
    Flaw("target", False, "the target is missing: you used softmax(z_i) alone. Subtract onehot(y_i): "
         "u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T."),
    Flaw("log", True, "you used log-probabilities (log_softmax). The derivative of -log softmax(z)_y with "
         "respect to z is softmax(z) - onehot(y), with the probabilities themselves."),
]

_U = Output(
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
        gen = generator(100 + n)
        logits = 2.0 * torch.randn(T, n_classes, generator=gen, dtype=DTYPE)
        y = torch.randint(0, n_classes, (T,), generator=gen)
        W_O = torch.randn(n_classes, d_v, generator=gen, dtype=DTYPE)
        expected = attention.error_signal(logits, y, W_O)[1]
        cases.append(make_case(signature, {"logits": logits, "y": y, "W_O": W_O}, [expected], input_note(T)))
    hint = ("W_O is stored (n_classes, d_v) and the positions are rows, so the W_O^T of the formula "
            "becomes a product on the right: (softmax - onehot) @ W_O / T.")
    return Spec("error_signal", signature, [_U], cases, hint)


def check_error_signal(fn):
    """Check ``fn(logits, y, W_O) -> u``, u_i = W_O^T (softmax(z_i) - onehot(y_i)) / T, shape (T, d_v)."""
    return run(_error_signal_spec(), fn)


# ----------------------------------------------------------------------------- score gradient

def _ds(inp, sign=1, mean="keys", weights=True):
    alpha, b = inp["alpha"], inp["b"]
    if weights == "b alone":
        return sign * b
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
    Flaw("sign", -1, "wrong sign: you returned alpha * (E_alpha[b] - b) = alpha * advantage. Raising s_ij "
         "moves weight onto key j, which changes L by b_ij minus the row's weighted mean, so "
         "dL/ds_ij = +alpha_ij (b_ij - E_alpha[b])."),
    Flaw("mean", "none", "missing the subtraction of the attention-weighted mean: alpha * b is only the direct "
         "path. The weights of a row sum to 1, so raising one takes weight from the others, which subtracts "
         "the row's E_alpha[b] = sum_j alpha_ij b_ij: dL/ds_ij = alpha_ij (b_ij - E_alpha[b])."),
    Flaw("mean", "queries", "the weighted mean is taken over the wrong axis: you summed alpha_ij b_ij over the "
         "queries i (dim 0, down a column). E_alpha[b] of row i sums over the keys j of that row: "
         "(alpha * b).sum(dim=-1, keepdim=True)."),
    Flaw("mean", "no_keepdim", "the weighted mean broadcasts along the wrong axis: (alpha * b).sum(dim=-1) has "
         "shape (T,), which broadcasts as a row, so column j got the mean of row j. Keep the axis with "
         ".sum(dim=-1, keepdim=True) so that row i subtracts its own E_alpha[b]."),
    Flaw("mean", "unweighted", "the mean is not attention-weighted: you subtracted the plain average of b over "
         "the keys. The softmax subtracts the weighted mean E_alpha[b] = sum_j alpha_ij b_ij."),
    Flaw("weights", "b alone", "you returned b itself, the compatibility: that is dL/d alpha_ij, how the "
         "loss changes with a weight. The exercise asks for dL/ds_ij, through the softmax: a score does not "
         "move its weight alone, and it acts only through its weight. Two things are missing: what raising "
         "one weight takes from the others of the row, and the weight itself in front."),
    Flaw("weights", False, "the weights alpha are missing in front: you returned b - E_alpha[b]. A score acts "
         "only through its weight, dL/ds_ij = alpha_ij (b_ij - E_alpha[b]), so masked keys (alpha = 0) get 0."),
]

_DS = Output(
    "dL/ds", ("T", "T"),
    "dL/ds = alpha * (b - (alpha * b).sum(dim=-1, keepdim=True)), i.e. alpha_ij (b_ij - sum_k alpha_ik b_ik)",
    _ds, _DS_FLAWS,
    hint="go through the weights: raising s_ij raises alpha_ij and lowers every other weight of row i, "
         "because a row sums to 1. What does that do to the loss, compared with the row's attended mean?",
    shape_hints={("T",): "One number per row: that is the weighted mean E_alpha[b]; dL/ds has one entry per "
                         "score, alpha * (b - E_alpha[b]).",
                 ("T", "?"): "Did a keepdim=True end up in the wrong place?"},
)


def _score_gradient_spec():
    signature = {"alpha": ("T", "T"), "b": ("T", "T")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = generator(200 + n)
        alpha = peaked_attention(T, n, gen)
        b = torch.randn(T, T, generator=gen, dtype=DTYPE)
        expected = attention.score_gradient(alpha, b)[0]
        cases.append(make_case(signature, {"alpha": alpha, "b": b}, [expected], input_note(T, is_causal(n))))
    hint = "alpha and b are (T, T), queries on the rows and keys on the columns."
    return Spec("score_gradient", signature, [_DS], cases, hint)


def check_score_gradient(fn):
    """Check ``fn(alpha, b) -> dL/ds`` = alpha * (b - E_alpha[b]), E_alpha[b]_i = sum_j alpha_ij b_ij."""
    return run(_score_gradient_spec(), fn)


# ----------------------------------------------------------------------------- attended gap (chapter 1)

def _gap(inp, **knobs):
    """b_ij - E_alpha_i[b]: the score gradient of chapter 2 without its factor alpha (knobs of _ds)."""
    return _ds(inp, **{"weights": False, **knobs})


_GAP = Output(
    "gap", ("T", "T"),
    "gap = b - (alpha * b).sum(dim=-1, keepdim=True), i.e. b_ij - sum_k alpha_ik b_ik",
    _gap,
    [
        Flaw("mean", "none", "you returned b itself. The sign of b_ij is not the test: a query's attention sums "
             "to one, so attention given to v_j is taken from the other values, and what counts is b_ij minus "
             "the row's attended mean E_alpha[b] = sum_k alpha_ik b_ik."),
        Flaw("sign", -1, "wrong sign: you returned E_alpha[b] - b_ij (that is the advantage of chapter 2, "
             "minus the gap). The gap is b_ij - E_alpha[b]: negative where more attention lowers the loss."),
        Flaw("mean", "queries", "the mean is taken over the wrong axis: you summed alpha_ij b_ij over the "
             "queries i (dim 0). Query i's attended mean sums over its own row: "
             "(alpha * b).sum(dim=-1, keepdim=True)."),
        Flaw("mean", "no_keepdim", "the mean broadcasts along the wrong axis: (alpha * b).sum(dim=-1) has shape "
             "(T,), which broadcasts as a row, so column j got the mean of row j. Keep the axis with "
             "keepdim=True so that row i subtracts its own E_alpha[b]."),
        Flaw("mean", "unweighted", "the mean is not attention-weighted: you subtracted the plain average of b "
             "over the row. The output g_i is the alpha-weighted mixture, so the yardstick is "
             "sum_k alpha_ik b_ik = u_i . g_i."),
        Flaw("weights", True, "you multiplied by alpha: alpha_ij (b_ij - E_alpha[b]) is dL/ds_ij (chapter 2). "
             "The gap is the bracket alone."),
    ],
)


def _attended_gap_spec():
    signature = {"alpha": ("T", "T"), "b": ("T", "T")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        gen = generator(1000 + n)
        alpha = peaked_attention(T, n, gen)
        b = torch.randn(T, T, generator=gen, dtype=DTYPE)
        expected = b - (alpha * b).sum(dim=-1, keepdim=True)
        cases.append(make_case(signature, {"alpha": alpha, "b": b}, [expected], input_note(T, is_causal(n))))
    hint = "alpha and b are (T, T), queries on the rows and positions on the columns."
    return Spec("attended_gap", signature, [_GAP], cases, hint)


def check_attended_gap(fn):
    """Check ``fn(alpha, b) -> gap``, gap_ij = b_ij - E_alpha_i[b] with E_alpha_i[b] = sum_k alpha_ik b_ik."""
    return run(_attended_gap_spec(), fn)


# ----------------------------------------------------------------------------- random heads

def _random_problem(n, seed):
    """x, y, params of problem ``n`` of SIZES, with weights large enough that alpha is far from uniform."""
    T, d_x, d_k, d_v, n_classes = SIZES[n]
    gen = generator(seed + n)
    x = torch.randn(T, d_x, generator=gen, dtype=DTYPE)
    y = torch.randint(0, n_classes, (T,), generator=gen)
    params = attention.init_params(d_x, d_k, d_v, n_classes, std=0.7, seed=seed + n, dtype=DTYPE)
    return x, y, params


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
        Flaw("scale", "1", f"missing the 1/sqrt(d_k): {why}"),
        Flaw("scale", "1/d_k", f"divided by d_k instead of sqrt(d_k): {why}"),
        Flaw("scale", "sqrt(d_k)", f"multiplied by sqrt(d_k) where the formula divides by it: {why}"),
        Flaw("sign", -1, "wrong sign: dq = +ds @ k / sqrt(d_k) and dk = +ds^T @ q / sqrt(d_k) (the minus sign "
             "of the advantage form is already inside ds)."),
    ]


_DQ = Output(
    "dq", ("T", "d_k"), "dq = ds @ k / sqrt(d_k)", _through_scores(False, "k"),
    _scale_flaws() + [
        Flaw("transpose", True, "transposed ds: query i collects from the keys j of its own row, "
             "dq_i = sum_j ds_ij k_j / sqrt(d_k), which is ds @ k, not ds^T @ k."),
        Flaw("partner", "q", "used q where k belongs: s_ij = q_i . k_j / sqrt(d_k) changes with q_i at the "
             "rate k_j / sqrt(d_k), so dq = ds @ k / sqrt(d_k)."),
    ],
)

_DK = Output(
    "dk", ("T", "d_k"), "dk = ds^T @ q / sqrt(d_k)", _through_scores(True, "q"),
    _scale_flaws() + [
        Flaw("transpose", False, "transpose missing: key j collects from every query i that looks at it, "
             "dk_j = sum_i ds_ij q_i / sqrt(d_k), which is ds^T @ q (you used ds @ q)."),
        Flaw("partner", "k", "used k where q belongs: s_ij = q_i . k_j / sqrt(d_k) changes with k_j at the "
             "rate q_i / sqrt(d_k), so dk = ds^T @ q / sqrt(d_k)."),
    ],
)

_DV = Output(
    "dv", ("T", "d_v"), "dv = alpha^T @ u", _dv,
    [
        Flaw("transpose", False, "transpose missing: v_j reaches every g_i through alpha_ij, so "
             "dv_j = sum_i alpha_ij u_i, which is alpha^T @ u (you used alpha @ u)."),
        Flaw("weights", "ds", "used ds where alpha belongs: g = alpha @ v is linear in v, with the attention "
             "weights themselves as coefficients, so dv = alpha^T @ u."),
        Flaw("scaled", True, "dv has no 1/sqrt(d_k): that scale sits inside the scores, which v does not "
             "enter; dv = alpha^T @ u."),
        Flaw("sign", -1, "wrong sign: dv = +alpha^T @ u."),
    ],
)


def _qkv_spec():
    signature = {"q": ("T", "d_k"), "k": ("T", "d_k"), "v": ("T", "d_v"),
                 "alpha": ("T", "T"), "ds": ("T", "T"), "u": ("T", "d_v")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        x, y, params = _random_problem(n, seed=300)
        fw = attention.forward(x, params, is_causal(n))
        grads = attention.gradients(x, y, params, is_causal(n))
        inputs = {"q": fw["q"], "k": fw["k"], "v": fw["v"], "alpha": fw["alpha"], "ds": grads["s"], "u": grads["u"]}
        expected = [grads["q"], grads["k"], grads["v"]]
        cases.append(make_case(signature, inputs, expected, input_note(T, is_causal(n))))
    hint = ("ds and alpha are (T, T) with queries on the rows and keys on the columns: a sum over the queries i "
            "(for dk and dv) needs their transpose.")
    return Spec("qkv_gradients", signature, [_DQ, _DK, _DV], cases, hint)


def check_qkv_gradients(fn):
    """Check ``fn(q, k, v, alpha, ds, u) -> (dq, dk, dv)``: ds @ k / sqrt(d_k), ds^T @ q / sqrt(d_k), alpha^T @ u."""
    return run(_qkv_spec(), fn)


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
        Flaw("sign", -1, "wrong sign: each dW = +d^T @ x, with d the gradient of that projection's output."),
        Flaw("scale", "1/T", "divided by T: the 1/T of the mean loss is already inside dq, dk and dv (it came "
             "in through u), so each dW = d^T @ x sums over the positions."),
    ]
    if other:  # dW_Q and dW_K have the same shape, so a mix-up shows only in the numbers
        flaws += [
            Flaw("scale", "1/sqrt(d_k)", "an extra 1/sqrt(d_k): that factor is already inside dq and dk, so "
                 "dW_Q = dq^T @ x and dW_K = dk^T @ x."),
            Flaw("source", other, "built from the other one's gradient: each projection's gradient uses the "
                 "gradient of its own output, dW_Q = dq^T @ x and dW_K = dk^T @ x (check the order of the "
                 "returned tuple)."),
        ]
    return Output(
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
        grads = attention.gradients(x, y, params, is_causal(n))
        inputs = {"x": x, "dq": grads["q"], "dk": grads["k"], "dv": grads["v"]}
        expected = [grads["W_Q"], grads["W_K"], grads["W_V"]]
        cases.append(make_case(signature, inputs, expected, input_note(T, is_causal(n))))
    hint = ("x is (T, d_x) and dq is (T, d_k): the sum over positions of dq_t x_t^T is dq^T @ x, of shape "
            "(d_k, d_x) as nn.Linear stores (out, in).")
    return Spec("projection_gradients", signature, outputs, cases, hint)


def check_projection_gradients(fn):
    """Check ``fn(x, dq, dk, dv) -> (dW_Q, dW_K, dW_V)``, each dW = d^T @ x of shape (d_out, d_x)."""
    return run(_projection_spec(), fn)


# ----------------------------------------------------------------------------- score-space kernel (chapter 3)

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


_KERNEL = Output(
    "K", ("T", "T", "T", "T"),
    "K[i', j', i, j] = [(x_i . x_i')(k_j . k_j') + (x_j . x_j')(q_i . q_i')] / d_k, e.g. "
    "(einsum('ai,bj->abij', x @ x.T, k @ k.T) + einsum('bj,ai->abij', x @ x.T, q @ q.T)) / d_k",
    _kernel,
    [
        Flaw("scale", "1/sqrt(d_k)", "divided by sqrt(d_k) instead of d_k: each score carries 1/sqrt(d_k), and "
             "K multiplies two score gradients (K = J J^T), so it carries 1/d_k."),
        Flaw("scale", "1", "missing the 1/d_k: each score carries 1/sqrt(d_k), and K multiplies two score "
             "gradients (K = J J^T), so it carries 1/d_k."),
        Flaw("terms", "Q", "only the W_Q route, (x_i . x_i')(k_j . k_j'): the step on W_K moves the scores too, "
             "which adds (x_j . x_j')(q_i . q_i')."),
        Flaw("terms", "K", "only the W_K route, (x_j . x_j')(q_i . q_i'): the step on W_Q moves the scores too, "
             "which adds (x_i . x_i')(k_j . k_j')."),
        Flaw("pairing", "swapped", "the factors are paired the wrong way: a step on W_Q moves query i' along the "
             "keys k_j of the pairs that push (scaled by x_i . x_i'), so the W_Q term is (x_i . x_i')(k_j . k_j'), "
             "not (x_i . x_i')(q_i . q_i'); likewise the W_K term is (x_j . x_j')(q_i . q_i')."),
        Flaw("layout", "aibj", "the axes are in the wrong order: you returned K[i', i, j', j] (einsum output "
             "'aibj'). The layout is K[i', j', i, j]: first the pair whose score moves, then the pair whose "
             "gradient pushes (output 'abij')."),
    ],
    shape_hints={("T", "T"): "That is one (T, T) block: K has one entry per pair of pairs, shape (T, T, T, T)."},
    hint="a gradient step on W_Q and one on W_K both move the score s_i'j'. Write each route as a product "
         "of two dot products (one between inputs, one between keys or between queries) and check which "
         "positions each pairs up.",
)


def _score_kernel_spec():
    signature = {"x": ("T", "d_x"), "q": ("T", "d_k"), "k": ("T", "d_k")}
    cases = []
    for n, (T, *_) in enumerate(SIZES):
        x, _, params = _random_problem(n, seed=1100)
        inputs = {"x": x, "q": x @ params["W_Q"].T, "k": x @ params["W_K"].T}
        cases.append(make_case(signature, inputs, [attention.score_kernel(**inputs)], input_note(T)))
    hint = ("x is (T, d_x), q and k are (T, d_k): x @ x.T, q @ q.T and k @ k.T are the (T, T) tables of dot "
            "products, and torch.einsum('ai,bj->abij', ...) combines two of them into a (T, T, T, T) tensor.")
    return Spec("score_kernel", signature, [_KERNEL], cases, hint)


def check_score_kernel(fn):
    """Check ``fn(x, q, k) -> K`` (T, T, T, T), K[i', j', i, j] = [(x_i . x_i')(k_j . k_j') + (x_j . x_j')(q_i . q_i')]/d_k."""
    return run(_score_kernel_spec(), fn)
