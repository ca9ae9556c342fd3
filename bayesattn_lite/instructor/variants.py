"""Class variants: a problem set handed out in other forms than the published one, chosen by a private seed.

The problem sets and their solutions are public (the book, the repository), so a class graded on the
published questions can copy their answers. A class variant asks the same question of another head:

- set 1, q1: the ALiBi head ``causal`` (published), ``bidirectional`` (an encoder's: every key, a penalty
  ``m |i - j|``) or ``mup`` (the scale ``1/(tau d_k)`` of muP in place of ``1/(tau sqrt(d_k))``);
- set 2, q3: the tempered kernel for a step on ``both`` W_Q and W_K (published), with ``frozen_keys``
  (the step moves W_Q only) or ``mup``.

The other questions have one form: their published solutions answer them in every variant (their
inputs change per submission, not their answer); ``instructors.md`` says so.

An instructor sets ``variant = <seed>`` under ``[<assignment id>]`` in a private copy of ``course.toml``;
``choose`` turns the seed into a form per question (never the published one), ``handout`` edits the
instructor notebook into that form (question text, the solution, the check cell's ``form=``), and the
generator (``python -m bayesattn_lite.instructor.assignments --course FILE --out DIR``) writes the class's
student and instructor notebooks from it. The grader, given the same ``--course`` and ``--folder DIR``,
grades each question against the class's form. Each edit below must match the instructor notebook
exactly once (``tests/test_variants.py``), so the published notebook cannot drift away from its variants.
"""

import copy
import random

from ..checks import problem_sets

FORMS = {  # (assignment id, question id) -> the check's forms, the published one first
    ("ps1_derivations", "q1"): tuple(problem_sets.BIASED_FORMS),
    ("ps2_dynamics", "q3"): tuple(problem_sets.TEMPERED_FORMS),
}

_BIASED_CHECK = "checks.check_biased_qk_gradients(biased_qk_gradients)"
_TEMPERED_CHECK = "checks.check_tempered_score_change(tempered_score_change)"
_PS2_HEAD = r"$s_{ij} = q_i\cdot k_j/(\tau\sqrt{d_k})$. Unbatched"

# (assignment id, question id, form) -> the (old, new) text edits of the instructor notebook for that form
EDITS = {
    ("ps1_derivations", "q1", "bidirectional"): (
        ("positions as rows), causal:", "positions as rows), bidirectional (every query sees every key, before "
         "and after it, as in an encoder):"),
        ("- m\\,(i - j)\\quad (j \\le i),\\qquad\n\\alpha_{ij} = \\mathrm{softmax}_{j\\le i}(s_{ij})",
         "- m\\,|i - j|\\quad (\\text{every } j),\\qquad\n\\alpha_{ij} = \\mathrm{softmax}_{j}(s_{ij})"),
        ("(with the mask, the temperature and the bias)", "(with the temperature and the bias; no mask: this "
         "head sees every key)"),
        ("of a causal head with s_ij = q_i.k_j / (tau sqrt(d_k)) - slope (i - j).",
         "of a bidirectional head with s_ij = q_i.k_j / (tau sqrt(d_k)) - slope |i - j|."),
        ("compute alpha as the head does (mask, temperature, bias)",
         "compute alpha as the head does (temperature, bias, no mask)"),
        ("torch.arange(T)[None, :]).to(q.dtype)  # i - j\n", "torch.arange(T)[None, :]).abs().to(q.dtype)  # |i - j|\n"),
        ("    scores = scores.masked_fill(~attention.causal_mask(T), float(\"-inf\"))\n", ""),
        (_BIASED_CHECK, _BIASED_CHECK[:-1] + ', form="bidirectional")'),
        ("Why does the bias $-m(i-j)$ add", "Why does the bias $-m|i-j|$ add"),
    ),
    ("ps1_derivations", "q1", "mup"): (
        ("positions as rows), causal:", "positions as rows), causal, with muP's attention scale $1/d_k$ in "
         "place of the usual $1/\\sqrt{d_k}$:"),
        ("s_{ij} = \\frac{q_i\\cdot k_j}{\\tau\\sqrt{d_k}} - m", "s_{ij} = \\frac{q_i\\cdot k_j}{\\tau\\, d_k} - m"),
        ("s_ij = q_i.k_j / (tau sqrt(d_k)) - slope (i - j).", "s_ij = q_i.k_j / (tau d_k) - slope (i - j)."),
        ("    scale = tau * d_k ** 0.5\n", "    scale = tau * d_k\n"),
        (_BIASED_CHECK, _BIASED_CHECK[:-1] + ', form="mup")'),
        ("k_j/(\\tau\\sqrt{d_k})$ exactly as without it", "k_j/(\\tau d_k)$ exactly as without it"),
        ("content part $q_i\\cdot k_j/\\sqrt{d_k}$ of the score", "content part $q_i\\cdot k_j/d_k$ of the score"),
    ),
    ("ps2_dynamics", "q3", "frozen_keys"): (
        (_PS2_HEAD, _PS2_HEAD.removesuffix(". Unbatched") + " whose key projection $W_K$ is frozen. Unbatched"),
        ("one gradient step of size $\\eta$\non $W_Q$ and $W_K$ moves the scores",
         "one gradient step of size $\\eta$\non $W_Q$ alone ($W_K$ is frozen: it does not train) moves the scores"),
        ("one gradient step (size eta) on W_Q and W_K,", "one gradient step (size eta) on W_Q alone (W_K frozen),"),
        ("how does one step on W_Q and W_K move every q_i and k_j", "how does one step on W_Q (W_K is frozen) "
         "move every q_i"),
        ("-eta * x @ dW_K.T   # how the step moves every query and key",
         "torch.zeros_like(k)   # W_K is frozen: the keys do not move"),
        (_TEMPERED_CHECK, _TEMPERED_CHECK[:-1] + ', form="frozen_keys")'),
    ),
    ("ps2_dynamics", "q3", "mup"): (
        (_PS2_HEAD, r"$s_{ij} = q_i\cdot k_j/(\tau\, d_k)$ (muP's $1/d_k$ in place of the usual $1/\sqrt{d_k}$). "
         "Unbatched"),
        ("With $s_{ij} = q_i\\cdot k_j/(\\tau\\sqrt{d_k})$,", "With $s_{ij} = q_i\\cdot k_j/(\\tau\\, d_k)$,"),
        ("on W_Q and W_K, s = q.k / (tau sqrt(d_k)).", "on W_Q and W_K, s = q.k / (tau d_k)."),
        ("    scale = tau * q.shape[1] ** 0.5\n", "    scale = tau * q.shape[1]\n"),
        (_TEMPERED_CHECK, _TEMPERED_CHECK[:-1] + ', form="mup")'),
    ),
}


def choose(assignment_id, seed):
    """{question id: form} of the class variant ``seed`` (an integer, kept private) of a problem set: for
    each question with forms, one of its forms other than the published one, the same for the same seed."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    return {qid: random.Random(f"{aid}/{qid}/{seed}").choice(forms[1:])
            for (aid, qid), forms in FORMS.items() if aid == assignment_id}


def handout(nb, assignment_id, forms):
    """A copy of the instructor notebook ``nb`` edited into ``forms`` ({question id: form}); the metadata
    ``bayesattn_lite.variant`` records them. ValueError when an edit does not match exactly once."""
    nb = copy.deepcopy(nb)
    already = recorded(nb)   # a class folder's notebook is in its forms already (--folder of a variant)
    for qid, form in forms.items():
        if already.get(qid, FORMS[(assignment_id, qid)][0]) == form:
            continue
        if qid in already:
            raise ValueError(f"{assignment_id} {qid}: the notebook is in the form {already[qid]!r} already, "
                             f"expected the published one or {form!r}: start from the course's book/assignments")
        for old, new in EDITS[(assignment_id, qid, form)]:
            found = [c for c in nb.cells if old in c.source]
            count = sum(c.source.count(old) for c in found)
            if count != 1:
                raise ValueError(f"{assignment_id} {qid} {form}: expected the text {old[:60]!r} once in the "
                                 f"instructor notebook, found it {count} times (update variants.EDITS)")
            found[0].source = found[0].source.replace(old, new)
    nb.metadata.setdefault("bayesattn_lite", {})["variant"] = {**already, **forms}
    return nb


def recorded(nb):
    """The forms a notebook says it was handed out in ({question id: form}; {} for the published one)."""
    meta = nb.get("metadata", {}).get("bayesattn_lite", {}) if nb else {}
    variant = meta.get("variant", {}) if isinstance(meta, dict) else {}
    return {str(k): str(v) for k, v in variant.items()} if isinstance(variant, dict) else {}
