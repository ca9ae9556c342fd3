"""An interactive panel for chapter 6: rerun a small EM-vs-SGD experiment with other settings.

Three controls: the value/routing rate ratio, the stickiness of the chain (the authors'
self-probability before renormalisation) and the base learning rate. Each change reruns
``experiments.em_vs_sgd`` on a small version (3 seeds, T = 600, 1000 steps: a few seconds on a
CPU) and redraws the loss curves and the speed-up per seed. The chapter draws the default state
as a static figure above the widget with the same ``draw`` function.
"""

import matplotlib.pyplot as plt
import numpy as np

from . import experiments
from .plots import COLORS, seed_bands, strip
from .tasks import StickyMarkovChain
from .train import TrainingDiverged

DEFAULTS = {"ratio": 10.0, "self_prob": 0.3, "lr": 0.01}
SMALL = {"seeds": (42, 2024, 1337), "T": 600, "steps": 1000}
RATIOS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0)
RATES = (0.003, 0.01, 0.03, 0.1)


def small_run(ratio=DEFAULTS["ratio"], self_prob=DEFAULTS["self_prob"], lr=DEFAULTS["lr"], device=None, **size):
    """The small EM-vs-SGD run the widget shows (``size`` overrides seeds, T, steps)."""
    size = {**SMALL, **size}
    chain = StickyMarkovChain(self_prob=self_prob)
    return experiments.em_vs_sgd(seeds=size["seeds"], steps=size["steps"], T=size["T"], lr=lr,
                                 value_lr_ratio=ratio, chain=chain, device=device, progress=False)


def draw(fig, result):
    """Loss curves (both schedules, exact Bayes level, held-out loss of the final weights as
    diamonds at the right edge) and the speed-up per seed, on ``fig``."""
    ax_loss, ax_speed = fig.subplots(1, 2, gridspec_kw={"width_ratios": (2.2, 1)})
    seed_bands(ax_loss, result.loss_sgd, COLORS["sgd"], f"SGD, lr {result.lr:g}")
    seed_bands(ax_loss, result.loss_em, COLORS["em"], f"EM-like, $W_V$ lr x{result.value_lr_ratio:g}")
    ax_loss.axhline(float(np.mean(result.bayes_loss)), color="black", ls="--", lw=1, label="exact Bayes (mean)")
    ax_loss.axhline(float(np.mean(result.final_loss_sgd)), color=COLORS["sgd"], ls=":", lw=1,
                    label="SGD's final loss (mean)")
    # a short sequence can be fitted below the Bayes level: the held-out loss shows what generalises
    held = result.run.held_out()
    for name, key in (("sgd", "sgd"), ("em", "em")):
        ax_loss.scatter([result.steps * 1.02] * len(result.seeds), held[key]["loss"], color=COLORS[name],
                        marker="D", s=14, clip_on=False, zorder=4)
    ax_loss.scatter([], [], color="0.4", marker="D", s=14, label="final weights on a held-out sequence")
    chain = result.run.chain
    ax_loss.set(xlabel="step", ylabel="training loss (nats)",
                title=f"stickiness {chain.self_prob:g} (diagonal {chain.transition_matrix[0, 0]:.2f}), "
                      f"T = {result.T}")
    fig.legend(*ax_loss.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=7)
    strip(ax_speed, ["EM-like\nvs SGD"], [result.speedup], colors=[COLORS["em"]], reference=1.0,
          ylabel="speed-up (SGD's steps / EM's)")
    finite = result.speedup[np.isfinite(result.speedup)]
    ax_speed.set_title(f"median {np.median(result.speedup):.2f}x" if len(finite) == len(result.speedup)
                       else "EM never reached SGD's final loss on some seeds")
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return ax_loss, ax_speed


def draw_message(fig, message):
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10)
    return ax


def explorer(initial=None, figsize=(10.0, 4.4), device=None):
    """The ipywidgets panel: ratio, stickiness and base rate; reruns ``small_run`` on release.

    ``initial`` is the result of ``small_run()`` at the defaults, if already computed (the
    chapter's static figure): the panel then shows it instead of training it again. Results are
    kept, so moving a control back costs nothing.
    """
    import ipywidgets
    from IPython.display import display

    style = {"description_width": "initial"}
    layout = ipywidgets.Layout(width="420px")
    cache = {}
    if initial is not None:
        cache[(DEFAULTS["ratio"], DEFAULTS["self_prob"], DEFAULTS["lr"])] = initial

    def update(ratio, self_prob, lr):
        fig = plt.figure(figsize=figsize)
        key = (float(ratio), round(float(self_prob), 6), float(lr))
        try:
            if key not in cache:
                cache[key] = small_run(ratio, self_prob, lr, device=device)
            result = cache[key]
            draw(fig, result)
        except TrainingDiverged as error:  # a clear message instead of nan curves
            result = None
            draw_message(fig, f"This setting diverged:\n{error}")
        display(fig)
        plt.close(fig)
        return result

    return ipywidgets.interactive(
        update,
        ratio=ipywidgets.SelectionSlider(options=RATIOS, value=DEFAULTS["ratio"], continuous_update=False,
                                         description="W_V rate / routing rate", style=style, layout=layout),
        self_prob=ipywidgets.FloatSlider(value=DEFAULTS["self_prob"], min=0.0, max=0.9, step=0.05,
                                         continuous_update=False, description="stickiness (self-probability)",
                                         style=style, layout=layout),
        lr=ipywidgets.SelectionSlider(options=RATES, value=DEFAULTS["lr"], continuous_update=False,
                                      description="base learning rate", style=style, layout=layout),
    )
