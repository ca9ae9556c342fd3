"""Interactive panels of the chapters (ipywidgets), each backed by a plain compute function and a
plain drawing function.

The drawing functions take a matplotlib figure and a state dict and draw with plain matplotlib,
so a chapter first draws the *static* figure of a widget's default state (visible in the online
book without a kernel) and then the widget, which redraws the same figure whenever a control moves.

Advantage explorer (chapter 2): one query i, a few visible positions j with 2-D values v_j, the
error signal u_i and the scores s_ij. The panel shows

- the value space: the values v_j, u_i, the attended output g_i = sum_j alpha_ij v_j and the line
  through g_i perpendicular to u_i; values on the far side of it (against u_i) have positive
  advantage;
- bar charts of alpha_i, b_i (with its attended mean E_{alpha_i}[b]), the advantage
  A_ij = E_{alpha_i}[b] - b_ij and the change of alpha_i after one gradient-descent step on the
  scores, s_i <- s_i - eta dL/ds_i.
"""

import functools
from collections.abc import Mapping
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from . import _validate, experiments, plots, specialisation
from ._types import Float, Int, Real, Seeds, Shaped, Tensor, checked
from .plots import COLORS, heatmap, to_numpy
from .train import TrainingDiverged

# Signed quantities use the two ends of the red-blue scale of plots.heatmap(signed=True):
# red for positive, blue for negative.
POSITIVE, NEGATIVE = "#b2182b", "#2166ac"

# The explorer's default state: five visible positions, 2-D values, one query.
DEFAULT_VALUES = ((1.0, 0.3), (0.2, 1.0), (-0.5, -0.2), (-0.6, 0.9), (0.7, -0.8))
DEFAULT_U = (float(np.cos(np.radians(35.0))), float(np.sin(np.radians(35.0))))  # length 1, at 35 degrees
DEFAULT_SCORES = (0.5, 1.0, -0.3, 0.2, 0.0)
DEFAULT_ETA = 2.0
DEFAULT_MOVED = 2


# ----------------------------------------------------------------------------- compute

def _softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


@checked
def advantage_state(values=DEFAULT_VALUES, u=DEFAULT_U, scores=DEFAULT_SCORES, eta: Real(0) = DEFAULT_ETA):
    """Everything the advantage panel shows for one query, computed with numpy (float64).

    ``values`` is (n, 2) (one row per visible position j), ``u`` the error signal u_i (2,),
    ``scores`` the scores s_ij (n,), ``eta`` the learning rate of one gradient step on the scores.
    Returns a dict: values, u, scores, eta, alpha, b, expected_b, advantage, ds (= dL/ds_ij),
    g (= sum_j alpha_ij v_j), scores_next, alpha_next and delta_alpha (= alpha_next - alpha).
    """
    # eta >= 0, a step size: a negative one would be a step of gradient ascent
    values, u, scores = (_validate.number_array(what, a) for what, a in (("values", values), ("u", u), ("scores", scores)))
    if values.ndim != 2 or values.shape[1] != 2 or not len(values):
        _validate.fail("values", "shape (n >= 1, 2): one value v_j in the plane per position", values)
    if u.shape != (2,):
        _validate.fail("u", "shape (2,): the error signal u_i in the values' plane", u)
    if scores.shape != (len(values),):
        _validate.fail("scores", f"shape ({len(values)},): one score per value", scores)
    for what, a in (("values", values), ("u", u), ("scores", scores)):   # NaN in would be NaN on every panel
        if not np.isfinite(a).all():
            _validate.fail(what, "finite values", f"{int((~np.isfinite(a)).sum())} NaN/inf entries", described=True)
    alpha = _softmax(scores)
    b = values @ u                      # b_ij = u_i . v_j = dL/dalpha_ij
    expected_b = float(alpha @ b)       # E_{alpha_i}[b] = u_i . g_i
    advantage = expected_b - b          # A_ij
    ds = alpha * (b - expected_b)       # dL/ds_ij = -alpha_ij A_ij
    scores_next = scores - eta * ds     # one gradient-descent step on the scores
    alpha_next = _softmax(scores_next)
    return {
        "values": values, "u": u, "scores": scores, "eta": float(eta),
        "alpha": alpha, "b": b, "expected_b": expected_b, "advantage": advantage, "ds": ds,
        "g": alpha @ values, "scores_next": scores_next, "alpha_next": alpha_next,
        "delta_alpha": alpha_next - alpha,
    }


def default_advantage_state():
    """The state the explorer starts in (and its static figure shows)."""
    return advantage_state()


# ----------------------------------------------------------------------------- draw

def _signed_bars(ax, heights, title, ylabel=None):
    heights = np.asarray(heights, dtype=float)
    colors = [POSITIVE if h > 0 else NEGATIVE for h in heights]
    ax.bar(np.arange(len(heights)), heights, color=colors, width=0.65)
    ax.axhline(0.0, color="0.3", lw=0.8)
    bound = max(float(np.abs(heights).max()), 1e-12) * 1.15
    ax.set_ylim(-bound, bound)
    ax.set_xticks(range(len(heights)))
    ax.set(title=title, xlabel="position j")
    if ylabel:
        ax.set_ylabel(ylabel)


def _beyond(point, points=10.0):
    """An offset (in points) that puts a label just past the tip of an arrow from the origin."""
    norm = float(np.linalg.norm(point))
    return (0.0, points) if norm < 1e-12 else tuple(points * np.asarray(point) / norm)


def _value_space(ax, state, moved):
    values, u, g = state["values"], state["u"], state["g"]
    reach = max(float(np.abs(values).max()), float(np.abs(u).max()), 1.0) * 1.3
    ax.set_xlim(-reach, reach)
    ax.set_ylim(-reach, reach)
    ax.set_aspect("equal")
    # The line through g_i perpendicular to u_i: b_ij = E[b] on it. Shade the side against u_i,
    # where b_ij < E[b], i.e. the values with positive advantage.
    u_hat = u / max(np.linalg.norm(u), 1e-12)
    normal = np.array([-u_hat[1], u_hat[0]])
    far = 4 * reach
    line = np.array([g + far * normal, g - far * normal])
    behind = np.array([line[0], line[1], line[1] - far * u_hat, line[0] - far * u_hat])
    ax.fill(behind[:, 0], behind[:, 1], color=POSITIVE, alpha=0.12, lw=0)
    ax.plot(line[:, 0], line[:, 1], ls="--", color="0.5", lw=0.9)
    for j, v in enumerate(values):
        highlight = j == moved
        ax.annotate("", xy=v, xytext=(0, 0), arrowprops=dict(
            arrowstyle="-|>", color=COLORS["value"], lw=2.2 if highlight else 1.3,
            alpha=1.0 if highlight else 0.75))
        ax.annotate(f"$v_{j}$", v, textcoords="offset points", xytext=_beyond(v), fontsize=9,
                    ha="center", va="center", color=COLORS["value"],
                    fontweight="bold" if highlight else "normal")
    ax.annotate("", xy=u, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=COLORS["error"], lw=2))
    ax.annotate("$u_i$", u, textcoords="offset points", xytext=_beyond(u), fontsize=9, ha="center",
                va="center", color=COLORS["error"])
    ax.scatter([g[0]], [g[1]], color="black", s=25, zorder=4)
    ax.annotate("$g_i$", g, textcoords="offset points", xytext=(-16, -4), fontsize=9)
    ax.set(title=r"value space (shaded: $A_{ij} > 0$)", xlabel="coordinate 1", ylabel="coordinate 2")


def draw_advantage_panel(fig_or_axes, state, moved=DEFAULT_MOVED):
    """Draw the advantage panel of ``state`` (from ``advantage_state``).

    ``fig_or_axes`` is a matplotlib Figure (the panel lays out its own five axes) or a sequence
    of five Axes: value space, alpha, b, advantage, change of alpha. ``moved`` is the position
    whose value is drawn bold (the one the explorer's sliders move; None for none).
    Returns the five axes.
    """
    fig, axes = plots.figure_or_axes("fig_or_axes", fig_or_axes, 5)
    _validate.record("state", state, ("values", "u", "alpha", "b", "advantage", "delta_alpha"), "advantage_state")
    if moved is not None:
        moved = _validate.integer("moved", moved, 0, len(state["alpha"]) - 1)
    if axes is None:
        grid = fig.add_gridspec(2, 3, width_ratios=(1.25, 1, 1))
        axes = [fig.add_subplot(grid[:, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[0, 2]),
                fig.add_subplot(grid[1, 1]), fig.add_subplot(grid[1, 2])]
    ax_space, ax_alpha, ax_b, ax_adv, ax_delta = axes
    n = len(state["alpha"])

    _value_space(ax_space, state, moved)

    ax_alpha.bar(range(n), state["alpha"], color=COLORS["query"], width=0.65, label="before")
    ax_alpha.scatter(range(n), state["alpha_next"], marker="_", s=300, color="black", lw=1.5,
                     label="after one step", zorder=3)
    top = max(float(state["alpha"].max()), float(state["alpha_next"].max()))
    ax_alpha.set_ylim(0, max(0.5, 1.3 * top))
    ax_alpha.set_xticks(range(n))
    ax_alpha.set(title=r"attention $\alpha_{ij}$", xlabel="position j")
    ax_alpha.legend(loc="upper right", fontsize=8)

    _signed_bars(ax_b, state["b"], r"compatibility $b_{ij} = u_i \cdot v_j$")
    ax_b.axhline(state["expected_b"], color="black", ls="--", lw=1)
    ax_b.annotate(r"$E_{\alpha_i}[b]$", (n - 0.5, state["expected_b"]), textcoords="offset points",
                  xytext=(-2, 3), ha="right", fontsize=8)

    _signed_bars(ax_adv, state["advantage"], r"advantage $A_{ij} = E_{\alpha_i}[b] - b_{ij}$")
    _signed_bars(ax_delta, state["delta_alpha"],
                 rf"change of $\alpha_{{ij}}$ after one step, $\eta = {state['eta']:g}$")
    fig.tight_layout()
    return axes


# ----------------------------------------------------------------------------- panels

# What a panel shows where no kernel runs it: the online book leaves the widget view out of its pages
# (_config.yml, nb_mime_priority_overrides), since its sliders would move nothing there, and shows this
# line, the panel's plain-text form, under the static figure of its default state instead.
# (ipywidgets cuts a plain-text form at 110 characters.)
KERNEL_ONLY = "Interactive panel: its sliders run in Jupyter or Colab. The figure above shows its default state."


@functools.cache
def _panel_class():
    import ipywidgets

    class Panel(ipywidgets.interactive):
        """ipywidgets.interactive, whose plain-text form says where its controls work, and which runs its
        function once when it is made, under ipywidgets 8 (which does) and 7 (Colab's, which waits
        until it is displayed): ``result`` is the default state either way, computed once."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.result is None and hasattr(self, "on_displayed"):  # ipywidgets 7
                self.on_displayed(self.update, remove=True)
                self.update()

        def __repr__(self):
            return KERNEL_ONLY

    return Panel


def _panel(update, **controls):
    """``ipywidgets.interactive(update, **controls)`` that the online book replaces by ``KERNEL_ONLY``."""
    return _panel_class()(update, **controls)


# ----------------------------------------------------------------------------- widget

def advantage_explorer(values=DEFAULT_VALUES, u=DEFAULT_U, scores=DEFAULT_SCORES, eta=DEFAULT_ETA,
                       moved=DEFAULT_MOVED, figsize=(10.0, 5.4)):
    """An ipywidgets panel: move one value v_j (its two coordinates) and the error signal u_i
    (its angle), change the learning rate, and watch alpha, b, the advantage and one step's change
    of alpha.

    Returns the ``ipywidgets.interactive`` object. Its ``result`` is the current state (the dict
    of ``advantage_state``), and its ``children`` are the sliders (v_j coordinate 1, coordinate 2,
    angle of u_i in degrees, eta) followed by the output area.
    """
    import ipywidgets
    from IPython.display import display

    start = advantage_state(values, u, scores, eta)   # checked here, not inside the panel, which would hide the error
    figsize = _validate.figsize("figsize", figsize)
    moved = _validate.integer("moved", moved, 0, len(start["values"]) - 1)
    values, u = start["values"].copy(), start["u"]
    u_length = float(np.linalg.norm(u))
    u_angle = round(float(np.degrees(np.arctan2(u[1], u[0]))), 6)

    def slider(value, low, high, step, description):
        return ipywidgets.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                                      continuous_update=False, readout_format=".2f",
                                      style={"description_width": "initial"},
                                      layout=ipywidgets.Layout(width="420px"))

    def update(v_x, v_y, u_angle_deg, eta):
        moved_values = values.copy()
        moved_values[moved] = (v_x, v_y)
        theta = np.radians(u_angle_deg)
        state = advantage_state(moved_values, u_length * np.array([np.cos(theta), np.sin(theta)]),
                                scores, eta)
        fig = plt.figure(figsize=figsize)
        draw_advantage_panel(fig, state, moved)
        display(fig)
        plt.close(fig)
        return state

    return _panel(
        update,
        v_x=slider(values[moved, 0], -1.5, 1.5, 0.05, f"v_{moved}, coordinate 1"),
        v_y=slider(values[moved, 1], -1.5, 1.5, 0.05, f"v_{moved}, coordinate 2"),
        u_angle_deg=slider(u_angle, -180.0, 180.0, 5.0, "angle of u_i (degrees)"),
        eta=slider(float(eta), 0.0, 10.0, 0.1, "learning rate η"),
    )


# ----------------------------------------------------------------------------- training snapshots (chapter 4)
# A step slider over parameters recorded during training: for one sequence, the attention map alpha,
# the advantage A_ij = E_{alpha_i}[b] - b_ij and the values v_j at the chosen step, the values drawn
# in one fixed plane (the top two principal components of the last snapshot's values) with their
# path so far, so that the slider shows the training as motion, not as before and after.

@checked
def snapshot_states(snapshots: Mapping, x: Float[Tensor, "T d_x"], y: Int[Tensor, " T"], is_signal: Shaped[Tensor, " T"]) -> dict:
    """What the snapshot panel shows, for every recorded step.

    ``snapshots`` is {step: params} (the four matrices of ``attention``, e.g. from
    ``specialisation.parameter_snapshots``); ``x`` (T, d_x), ``y`` (T,) and ``is_signal`` (T,) are one
    sequence. Returns a dict: steps (n,), alpha (n, T, T), advantage (n, T, T) (0 where masked; the
    gradient of this sequence's own mean loss), values (n, T, d_v), plane (n, T, 2) (the values in the
    top two principal components of the last step's values), loss (n,), is_signal and y (T,).
    """
    from . import attention, diagnostics

    if not snapshots or not all(isinstance(k, int) and isinstance(v, Mapping) for k, v in snapshots.items()):
        given = (f"a mapping with keys {list(snapshots)[:4]}, values {[type(v).__name__ for v in list(snapshots.values())[:4]]}"
                 if isinstance(snapshots, Mapping) and snapshots else _validate.describe(snapshots))
        _validate.fail("snapshots", "a non-empty {step: params} dict, int steps (specialisation.parameter_snapshots)",
                       given, described=True)
    steps = sorted(snapshots)
    rows = []
    for step in steps:
        _validate.exact_keys(f"snapshots[{step}]", snapshots[step], attention.PARAM_NAMES)
        params = {name: p.detach().to(x.dtype) for name, p in snapshots[step].items()}
        fw = attention.forward(x, params)
        grads = attention.gradients(x, y, params)
        loss = float(attention.loss(x, y, params))
        rows.append((fw["alpha"], grads["advantage"], fw["v"], loss))
    values = np.stack([to_numpy(r[2]) for r in rows])
    if values.shape[1] < 2:   # one position: one value, at the centre of any plane
        plane = np.zeros(values.shape[:2] + (2,))
    else:
        pca = diagnostics.pca(values[-1], 2)  # one fixed plane: the last step's
        plane = (values - pca["mean"]) @ pca["components"].T
    return {"steps": np.array(steps), "alpha": np.stack([to_numpy(r[0]) for r in rows]),
            "advantage": np.stack([to_numpy(r[1]) for r in rows]), "values": values, "plane": plane,
            "loss": np.array([r[3] for r in rows]), "is_signal": to_numpy(is_signal) > 0, "y": to_numpy(y).astype(int)}


def _mark_keys(ax, is_signal):
    ax.set_xticks(range(len(is_signal)))
    ax.set_xticklabels(["S" if s else "·" for s in is_signal], fontsize=7)
    ax.set_yticks(range(0, len(is_signal), 5))


def draw_snapshot_panel(fig_or_axes, states, index):
    """Draw step number ``index`` of ``states`` (from ``snapshot_states``) on three axes: the attention
    map, the advantage map (red: gradient descent raises the score) and the values in the fixed plane,
    each value's path up to this step as a faint line. Returns the three axes."""
    fig, axes = plots.figure_or_axes("fig_or_axes", fig_or_axes, 3)
    _validate.record("states", states, ("steps", "alpha", "advantage", "plane", "is_signal"), "snapshot_states")
    n = len(states["steps"])
    index = _validate.integer("index", index, 0, n - 1)   # one per recorded step
    if axes is None:
        axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": (1, 1, 1.1)})
    step, sig = int(states["steps"][index]), states["is_signal"]
    T = len(sig)
    hidden = np.triu(np.ones((T, T)), 1)
    heatmap(axes[0], states["alpha"][index], title=f"attention $\\alpha_{{ij}}$, step {step}", mask=hidden,
            xlabel="key j (S: signal position)")
    axes[0].images[0].set_clim(0, 1)  # one scale for every step, so sharpening shows as colour
    heatmap(axes[1], states["advantage"][index], title=f"advantage $A_{{ij}}$, step {step}", signed=True,
            mask=hidden, xlabel="key j (S: signal position)")
    for ax in axes[:2]:
        _mark_keys(ax, sig)
    ax = axes[2]
    plane = states["plane"]
    low, high = plane.reshape(-1, 2).min(0), plane.reshape(-1, 2).max(0)
    pad = 0.08 * (high - low).max() or 1.0   # a single point still gets a visible square
    source_colors = [COLORS["query"], COLORS["key"], COLORS["value"], COLORS["em"], COLORS["error"]]
    for j in range(T):
        color = source_colors[states["y"][j] % len(source_colors)] if sig[j] else "0.6"
        ax.plot(plane[:index + 1, j, 0], plane[:index + 1, j, 1], color=color, lw=0.8, alpha=0.5)
        ax.scatter(*plane[index, j], color=color, s=28 if sig[j] else 12, zorder=3)
    ax.set_xlim(low[0] - pad, high[0] + pad)
    ax.set_ylim(low[1] - pad, high[1] + pad)
    ax.set(title=f"values $v_j$ and their paths, step {step}\n(loss on this sequence {states['loss'][index]:.3f})",
           xlabel="PC 1 of the final values", ylabel="PC 2")
    fig.tight_layout()
    return axes


def snapshot_slider(states, index=0, figsize=(14.0, 4.2)):
    """An ipywidgets step slider over ``states`` (from ``snapshot_states``): it redraws
    ``draw_snapshot_panel`` at the chosen step. Returns the ``ipywidgets.interactive`` object; its
    ``result`` is the index shown, its first child the slider (over the recorded steps)."""
    import ipywidgets
    from IPython.display import display

    _validate.record("states", states, ("steps", "alpha", "advantage", "plane", "is_signal"), "snapshot_states")
    figsize = _validate.figsize("figsize", figsize)
    steps = [int(s) for s in states["steps"]]
    index = _validate.integer("index", index, 0, len(steps) - 1)   # one per recorded step

    def update(step):
        i = steps.index(step)
        fig = plt.figure(figsize=figsize)
        draw_snapshot_panel(fig, states, i)
        display(fig)
        plt.close(fig)
        return i

    return _panel(update, step=ipywidgets.SelectionSlider(
        options=steps, value=steps[index], description="training step", continuous_update=False,
        style={"description_width": "initial"}, layout=ipywidgets.Layout(width="520px")))


# ----------------------------------------------------------------------------- chapter 4: the specialisation explorer

@checked
def specialisation_figure(cfg: specialisation.Config | None = None, seeds=(0, 1), figsize=(13.0, 3.2)):
    """Train ``cfg`` (default ``specialisation.Config.small()``) for ``seeds`` and draw ``plots.specialisation_curves``: the widget's
    figure, and the static figure of its default state."""
    figsize = _validate.figsize("figsize", figsize)
    runs = specialisation.run_seeds(cfg or specialisation.Config.small(), seeds)
    fig = plt.figure(figsize=figsize)
    plots.specialisation_curves(fig, runs)
    fig.tight_layout()
    return fig, runs


@checked
def specialisation_explorer(cfg: specialisation.Config | None = None, seeds: Seeds = (0, 1), figsize=(13.0, 3.2)):
    """An ipywidgets panel: choose the learning rate, the value/routing rate ratio and the number of
    steps; it retrains a small version (``specialisation.Config.small()``) for ``seeds`` and redraws ``specialisation_figure``."""
    # seeds declared: checked here, as inside the panel an error would only be shown there
    import ipywidgets
    from IPython.display import display

    cfg = cfg or specialisation.Config.small()
    figsize = _validate.figsize("figsize", figsize)

    def update(lr, value_ratio, steps):
        try:
            fig, runs = specialisation_figure(replace(cfg, lr=lr, value_ratio=value_ratio, steps=int(steps)), seeds, figsize)
        except TrainingDiverged as e:  # too large a rate: say so instead of drawing nan curves
            print(f"This run diverged: {e}")
            return None
        display(fig)
        plt.close(fig)
        return runs

    style, layout = {"description_width": "initial"}, ipywidgets.Layout(width="420px")
    return _panel(
        update,
        lr=ipywidgets.FloatLogSlider(value=cfg.lr, base=10, min=-2, max=0.3, step=0.1, description="learning rate η",
                                     continuous_update=False, style=style, layout=layout),
        value_ratio=ipywidgets.FloatLogSlider(value=cfg.value_ratio, base=10, min=-1, max=1.5, step=0.25,
                                              description="value / routing rate", continuous_update=False,
                                              style=style, layout=layout),
        steps=ipywidgets.IntSlider(value=cfg.steps, min=50, max=1000, step=50, description="steps",
                                   continuous_update=False, style=style, layout=layout),
    )


# ----------------------------------------------------------------------------- chapter 6: the EM-vs-SGD explorer
# Three controls: the value/routing rate ratio, the stickiness of the chain (the authors'
# self-probability before renormalisation) and the base learning rate. Each change reruns a small
# EM-vs-SGD experiment and redraws the loss curves and the speed-up per seed; the chapter draws
# the default state as a static figure above the widget with the same drawing function.

VALUE_RATIOS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0)   # the sticky explorer's choices of W_V factor
BASE_RATES = (0.003, 0.01, 0.03, 0.1)                      # and of base learning rate


@checked
def sticky_explorer(initial: experiments.EMvsSGDResult | None = None, figsize=(10.0, 4.4), device=None):
    """The ipywidgets panel: value ratio, stickiness and base rate; reruns ``experiments.EMvsSGDConfig.small``
    with them on release.

    ``initial`` is the result of ``experiments.EMvsSGDConfig.small().run()`` at the defaults, if already computed (the
    chapter's static figure): the panel then shows it instead of training it again. Results are
    kept, so moving a control back costs nothing.
    """
    import ipywidgets
    from IPython.display import display

    figsize = _validate.figsize("figsize", figsize)   # checked now: a control's rerun would only show the error
    if device is not None:
        device = _validate.device("device", device)
    style = {"description_width": "initial"}
    layout = ipywidgets.Layout(width="420px")
    cache, D = {}, experiments.EMvsSGDConfig.small()
    if initial is not None:
        cache[(D.value_ratio, D.self_prob, D.lr)] = initial

    def update(value_ratio, self_prob, lr):
        fig = plt.figure(figsize=figsize)
        key = (float(value_ratio), round(float(self_prob), 6), float(lr))
        try:
            if key not in cache:
                cache[key] = experiments.EMvsSGDConfig.small(value_ratio=key[0], self_prob=key[1], lr=key[2]).run(
                    device=device, progress=False)
            result = cache[key]
            plots.sticky_em_vs_sgd(fig, result)
        except TrainingDiverged as error:  # a clear message instead of nan curves
            result = None
            plots.message(fig, f"This setting diverged:\n{error}")
        display(fig)
        plt.close(fig)
        return result

    return _panel(
        update,
        value_ratio=ipywidgets.SelectionSlider(options=VALUE_RATIOS, value=D.value_ratio, continuous_update=False,
                                         description="W_V rate / routing rate", style=style, layout=layout),
        self_prob=ipywidgets.FloatSlider(value=D.self_prob, min=0.0, max=0.9, step=0.05,
                                         continuous_update=False, description="stickiness (self-probability)",
                                         style=style, layout=layout),
        lr=ipywidgets.SelectionSlider(options=BASE_RATES, value=D.lr, continuous_update=False,
                                      description="base learning rate", style=style, layout=layout),
    )
