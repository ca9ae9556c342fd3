"""Checks of the coding exercises of chapter 4b (one check per exercise, on the engine of ``_engine``).

- ``check_content_margin``  the content margin of a head's content map W_O W_V, the measure that tells
  chapter 4b's ablations whether content was learned (``specialisation.content_margin``)

(The chapter's other coding exercise, the advantage flow, is checked by ``chapters_4_5.check_advantage_flow``.)
"""

import numpy as np
import torch

from .. import specialisation
from ._engine import DTYPE, Flaw, Output, Spec, generator, make_case, run

__all__ = ["check_content_margin"]


# ----------------------------------------------------------------------------- content margin

def _margin(inp, others="rest", rival="mean", sign=1):
    """The content margin with one knob turned: ``others`` "all" averages the own class in with the
    rest; ``rival`` "max" takes the strongest other class, "none" subtracts nothing; ``sign`` -1 flips
    it. Without knobs it is ``specialisation.content_margin`` (as a float64 array, like the answers)."""
    W_O, W_V, means = inp["W_O"], inp["W_V"], inp["means"]
    if (others, rival, sign) == ("rest", "mean", 1):
        return np.array(specialisation.content_margin({"W_O": W_O, "W_V": W_V}, means))
    logits = means.double() @ (W_O.double() @ W_V.double()).T     # (K, K): row z, the logits for input mu_z
    K = logits.shape[0]
    own = logits.diagonal()
    if rival == "max":
        rest = logits.masked_fill(torch.eye(K, dtype=torch.bool), float("-inf")).max(1).values
    elif rival == "none":
        rest = torch.zeros_like(own)
    elif others == "all":
        rest = logits.mean(1)
    else:
        rest = (logits.sum(1) - own) / (K - 1)
    return np.array(sign * float((own - rest).mean()))


_MARGIN = Output(
    "margin", (),
    "specialisation.content_margin: M = W_O W_V, logits_z = M mu_z, and the mean over the sources z of "
    "(logits_z[z] - the mean of logits_z over the other K - 1 classes)",
    _margin,
    [Flaw("sign", -1, "wrong sign: the margin is positive when the content map favours each source's own class, "
                      "so it is the own class's logit minus the others', not the reverse."),
     Flaw("others", "all", "you averaged over all K classes, the source's own class included, so the own logit "
                           "partly cancels itself (your margin is (K - 1)/K of the right one). Compare the own "
                           "class with the other K - 1 classes only."),
     Flaw("rival", "none", "you returned the own class's logit alone. A logit means nothing on its own: adding the "
                           "same number to every class changes no prediction. The margin is a difference: the own "
                           "class against the other classes of the same input."),
     Flaw("rival", "max", "you subtracted the strongest other class (a 'worst case' margin). The content margin "
                          "subtracts the mean of the other classes' logits: how far the own class stands out on "
                          "average.")],
    hint="push each source mean through the content map to get its K logits; for each source, compare the logit "
         "of its own class with the other classes' logits of that same input; then average over the sources.",
)


def _content_margin_spec():
    signature = {"W_O": ("K", "d_v"), "W_V": ("d_v", "d_x"), "means": ("K", "d_x")}
    cases = []
    for n, (K, d_v, d_x) in enumerate([(3, 5, 7), (4, 2, 6), (5, 3, 8), (3, 6, 4)]):
        gen = generator(1450 + n)
        means = 2.0 * torch.randn(K, d_x, generator=gen, dtype=DTYPE)
        W_V = torch.randn(d_v, d_x, generator=gen, dtype=DTYPE) / d_x ** 0.5
        # a learned-looking readout (W_O close to the means seen through W_V) plus noise, so the margins
        # are positive and the rows differ from the columns
        W_O = 0.5 * (means @ W_V.T) + 0.3 * torch.randn(K, d_v, generator=gen, dtype=DTYPE)
        inputs = {"W_O": W_O, "W_V": W_V, "means": means}
        cases.append(make_case(signature, inputs, [_margin(inputs)], f"K={K} sources, d_v={d_v}, d_x={d_x}"))
    return Spec("content_margin", signature, [_MARGIN], cases,
                "W_O is (K, d_v), W_V is (d_v, d_x) and means is (K, d_x), one source mean per row: "
                "W_O @ W_V is the (K, d_x) content map.", numbers=True)


def check_content_margin(fn):
    """Check ``fn(W_O, W_V, means) -> margin`` (a number): with M = W_O W_V, the mean over the sources z
    of the logit of z's own class for the input mu_z minus the mean of the other classes' logits
    (``specialisation.content_margin``)."""
    return run(_content_margin_spec(), fn)
