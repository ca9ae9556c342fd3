"""Figure helpers shared by the chapters, so every chapter draws the same things the same way."""

import re
from collections.abc import Mapping, Sequence
from typing import Annotated

import matplotlib
import matplotlib.axes
import matplotlib.colors
import matplotlib.figure
import matplotlib.lines
import matplotlib.markers
import matplotlib.pyplot as plt
import numpy as np
import torch

from . import _validate, models, specialisation
from ._types import Distinct, Flag, Positive, Real, Whole, checked
from .experiments import EMvsSGDResult
from .specialisation import Run

Figure = Annotated[matplotlib.figure.FigureBase, "fig = plt.figure()"]   # a figure or a subfigure
Axes = Annotated[matplotlib.axes.Axes, "fig, ax = plt.subplots()"]
AxesList = Sequence[matplotlib.axes.Axes] | np.ndarray   # what fig.subplots returns, or a list of axes

# The Okabe-Ito palette: eight colours that stay distinct under the common colour-vision deficiencies.
OKABE_ITO = {
    "blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermilion": "#D55E00",
    "purple": "#CC79A7", "sky": "#56B4E9", "yellow": "#F0E442", "black": "#000000",
}
# One colour per role, used in every chapter, and one per architecture (chapters 7-9), from its
# entry in models.REGISTRY.
COLORS = {
    "query": OKABE_ITO["blue"], "key": OKABE_ITO["orange"], "value": OKABE_ITO["green"],
    "error": OKABE_ITO["vermilion"], "sgd": "0.45", "em": OKABE_ITO["purple"], "bayes": "black",
    **{arch.name: arch.colour for arch in models.REGISTRY.values()},
}


def style():
    """The course's figure style: small, legible, no top/right spines, colour-blind-safe colours.

    In a notebook, figures are stored at twice their pixel size ("retina"), so they stay crisp on
    high-resolution screens while the page lays them out at the same size as before.
    """
    from cycler import cycler
    plt.rcParams.update({
        "figure.figsize": (6.0, 3.6), "figure.dpi": 100, "font.size": 10,
        "axes.titlesize": 10, "axes.labelsize": 10, "axes.spines.top": False,
        "axes.spines.right": False, "legend.frameon": False, "image.cmap": "viridis",
        "axes.prop_cycle": cycler(color=list(OKABE_ITO.values())),
    })
    _retina_in_notebooks()


def _retina_in_notebooks():
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # no IPython: plain scripts save figures themselves
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def to_numpy(a):
    """A CPU float64 numpy copy of a tensor or array (figures never hold tensors)."""
    return _array("a", a)


# ----------------------------------------------------------------------------- input checks shared by the figures

def _array(what, value, ndim=None, expected=None):
    """``value`` (a tensor, array or nested list of numbers) as a float64 numpy array, with ``ndim``
    dimensions when given (``expected`` says which shape, e.g. "shape (seeds, steps)")."""
    array = _validate.number_array(what, value)
    if ndim is not None and array.ndim != ndim:
        _validate.fail(what, expected or f"{ndim} dimension(s)", f"shape {array.shape}", described=True)
    return array


def _color(what, value):
    """A colour matplotlib understands."""
    if not matplotlib.colors.is_color_like(value):
        _validate.fail(what, "a matplotlib colour (a name such as 'red', '#0072B2' or a grey level '0.5')", value)
    return value


def _points(what, value):
    """A (n, 2) float64 numpy array: points (or steps) in a plane."""
    p = _array(what, value)
    if p.ndim != 2 or p.shape[1] != 2:
        _validate.fail(what, "shape (n, 2) (points in a plane)", f"shape {p.shape}", described=True)
    return p


def figure_or_axes(what, value, n):
    """A matplotlib Figure, or a sequence of ``n`` Axes; returns (figure, axes or None)."""
    if isinstance(value, matplotlib.figure.Figure):
        return value, None
    axes = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if axes is None or len(axes) != n or not all(isinstance(a, matplotlib.axes.Axes) for a in axes):
        _validate.fail(what, f"a matplotlib Figure or {n} Axes (fig, axes = plt.subplots(...))",
                       f"{len(axes)} items" if axes is not None else f"a {type(value).__name__}", described=True)
    return axes[0].figure, axes


def _formats_a_number(fmt):
    try:
        return isinstance(fmt, str) and fmt.format(0.5) != fmt
    except (IndexError, KeyError, ValueError):
        return False


@checked
def heatmap(ax: Axes, matrix, title="", signed: Flag = False, mask=None, fmt=None, xlabel="key j", ylabel="query i"):
    """Draw a (T, T) matrix; ``signed`` centres a red-blue scale on zero; ``mask`` greys entries out.

    ``fmt`` (e.g. "{:.2f}") writes each value in its cell, for small matrices.
    """
    m = _array("matrix", matrix, ndim=2, expected="a 2-D (rows, columns) matrix")
    if m.size == 0:
        _validate.fail("matrix", "at least one row and one column", f"shape {m.shape}", described=True)
    if fmt is not None and not _formats_a_number(fmt):   # "%.2f" would print itself in every cell
        _validate.fail("fmt", 'None or a format string with one {} field for the value, such as "{:.2f}"', fmt)
    hidden = np.zeros(m.shape, dtype=bool) if mask is None else (
        _validate.shape("mask", _array("mask", mask), m.shape, "the shape of matrix") > 0)
    if not np.isfinite(m[~hidden]).all():   # a NaN cell would be drawn as nothing, a colour scale of NaN
        _validate.fail("matrix", "finite values (mask the cells that have none)",
                       f"{int((~np.isfinite(m[~hidden])).sum())} NaN/inf entries", described=True)
    shown = np.ma.masked_where(hidden, m)
    # A copy of the colour map with masked cells light grey (never edit the registered map).
    cmap = plt.get_cmap("RdBu_r" if signed else "viridis").with_extremes(bad="0.9")
    if signed:
        bound = max(float(np.abs(np.where(hidden, 0, m)).max()), 1e-12)
        im = ax.imshow(shown, cmap=cmap, vmin=-bound, vmax=bound)
    else:
        im = ax.imshow(shown, cmap=cmap)
    if fmt is not None:
        for (i, j), value in np.ndenumerate(m):
            if not hidden[i, j]:
                # White text on dark cells, black on light ones, so every number stays readable.
                r, g, b, _ = im.cmap(im.norm(value))
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.set_xticks(range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]))
    plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


@checked
def arrows(ax: Axes, points, deltas, color, label=None, scale: Real() = 1.0, annotate=None):
    """Points in 2-D with an arrow from each to point + scale * delta (one gradient step)."""
    _color("color", color)
    p, d = _validate.same_shape("points, deltas", _points("points", points), _points("deltas", deltas))
    d = d * scale
    if annotate is not None and not _formats_a_number(annotate):
        _validate.fail("annotate", 'None or a format string with one {} field for the point\'s number, e.g. "$v_{}$"',
                       annotate)
    ax.scatter(p[:, 0], p[:, 1], color=color, s=30, label=label, zorder=3)
    ax.quiver(p[:, 0], p[:, 1], d[:, 0], d[:, 1], color=color, angles="xy", scale_units="xy",
              scale=1.0, width=0.006, zorder=2)
    for n, (px, py) in enumerate(p):
        if annotate:
            ax.annotate(annotate.format(n), (px, py), textcoords="offset points", xytext=(4, 4), fontsize=8)


# ----------------------------------------------------------------------------- one step in a 2-D plane

def _label_points(ax, points, deltas, fmt, color):
    """Name each point on the side away from its arrow, so labels and arrows do not overlap."""
    for n, (p, d) in enumerate(zip(points, deltas)):
        length = float(np.hypot(*d))
        away = -d / length if length > 1e-12 else np.array([0.7071, 0.7071])
        ax.annotate(fmt.format(n), p, textcoords="offset points", xytext=tuple(11 * away),
                    ha="center", va="center", fontsize=9, color=color)


LEGEND_PLACES = ("best", "upper right", "upper left", "lower left", "lower right", "right", "center left",
                 "center right", "lower center", "upper center", "center")


def _finish_plane(ax, points, title, legend_loc):
    """Equal aspect, thin axes through 0, limits that include every point and arrow tip, a legend."""
    everything = np.vstack([*points, np.zeros((1, 2))])
    low, high = everything.min(axis=0), everything.max(axis=0)
    pad = 0.08 * max(float((high - low).max()), 1e-9) + 0.1
    ax.set_xlim(low[0] - pad, high[0] + pad)
    ax.set_ylim(low[1] - pad, high[1] + pad)
    ax.set_aspect("equal", adjustable="box")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_title(title)
    if legend_loc not in LEGEND_PLACES:
        _validate.fail("legend_loc", f"one of matplotlib's legend places {LEGEND_PLACES}", legend_loc)
    ax.legend(loc=legend_loc, fontsize=8)
    return ax


@checked
def qk_step(ax: Axes, q, k, dq, dk, lr: Positive, title="queries and keys: one gradient step", legend_loc="best"):
    """Queries and keys in a 2-D key space, each with an arrow for its step ``-lr * gradient``.

    ``q``, ``k`` are (T, 2) (d_k = 2) and ``dq``, ``dk`` their gradients dL/dq, dL/dk. The arrows
    are drawn at true length (the step itself), on equal axes, so angles can be read off.
    """
    # lr: Positive, a step size: a negative one would draw the step uphill
    q, k = _points("q", q), _points("k", k)
    dq, dk = _points("dq", dq), _points("dk", dk)
    for name, grad, point in (("dq", dq, q), ("dk", dk, k)):
        if grad.shape != point.shape:
            _validate.fail(name, f"the shape of {name[1:]} {point.shape} (gradients must match their points)",
                           grad.shape)
    arrows(ax, q, dq, COLORS["query"], label=r"query $q_i$, arrow $-\eta\,\partial L/\partial q_i$", scale=-lr)
    arrows(ax, k, dk, COLORS["key"], label=r"key $k_j$, arrow $-\eta\,\partial L/\partial k_j$", scale=-lr)
    _label_points(ax, q, -lr * dq, "$q_{{{}}}$", COLORS["query"])
    _label_points(ax, k, -lr * dk, "$k_{{{}}}$", COLORS["key"])
    return _finish_plane(ax, [q, k, q - lr * dq, k - lr * dk], title, legend_loc)


@checked
def value_step(ax: Axes, v, dv, u, lr: Positive, readout=None, u_scale: Positive = 1.0,
               title="values: one gradient step", legend_loc="best"):
    """Values in a 2-D value space with arrows ``-lr * dL/dv_j``, and the error signals u_i.

    ``v``, ``dv``, ``u`` are (T, 2) (d_v = 2). Each u_i is drawn from the origin, multiplied by
    ``u_scale`` (stated in the legend) so it is visible next to the values. ``readout`` (C, 2),
    when given, is W_O: its rows, the class directions, are drawn as dashed grey lines.
    """
    v, dv, u = (_points(name, a) for name, a in (("v", v), ("dv", dv), ("u", u)))
    if dv.shape != v.shape:
        _validate.fail("dv", f"the shape of v {v.shape} (a gradient must match its point)", dv.shape)
    shown = [v, v - lr * dv, u * u_scale]
    if readout is not None:
        w = _points("readout", readout)
        for c, (wx, wy) in enumerate(w):
            ax.plot([0, wx], [0, wy], ls="--", color="0.6", lw=1, zorder=1,
                    label="class directions (rows of $W_O$)" if c == 0 else None)
            ax.annotate(f"class {c}", (wx, wy), textcoords="offset points", xytext=(2, 2),
                        fontsize=8, color="0.4")
        shown.append(w)
    factor = "" if u_scale == 1 else rf" ($\times{u_scale:g}$)"
    ax.quiver(np.zeros(len(u)), np.zeros(len(u)), u[:, 0] * u_scale, u[:, 1] * u_scale,
              color=COLORS["error"], angles="xy", scale_units="xy", scale=1.0, width=0.005,
              alpha=0.7, zorder=2, label=f"error signal $u_i${factor}")
    for n, tip in enumerate(u * u_scale):  # name each error signal just beyond its tip
        length = float(np.hypot(*tip))
        out = tip / length if length > 1e-12 else np.array([0.7071, 0.7071])
        ax.annotate(f"$u_{{{n}}}$", tip, textcoords="offset points", xytext=tuple(9 * out),
                    ha="center", va="center", fontsize=9, color=COLORS["error"])
    arrows(ax, v, dv, COLORS["value"], label=r"value $v_j$, arrow $-\eta\,\partial L/\partial v_j$", scale=-lr)
    _label_points(ax, v, -lr * dv, "$v_{{{}}}$", COLORS["value"])
    return _finish_plane(ax, shown, title, legend_loc)


# ----------------------------------------------------------------------------- training runs over seeds

@checked
def seed_bands(ax: Axes, curves, color, label, steps=None, lw: Positive = 1.6, *, _what="curves"):
    """Median over seeds as a line and the min-max range over seeds as a band.

    ``curves`` is (seeds, steps); ``steps`` the x values (default 0, 1, ...). The label says how
    many seeds the band spans. A nan in a column leaves a gap in the line and the band there (a step
    a seed did not record), so a curve with gaps should say why in its caption.
    """
    _color("color", color)
    c = _array(_what, curves)   # _what: the name the caller gave curves (score_kernel_panels' agree_gradient)
    if c.ndim != 2 or 0 in c.shape:
        _validate.fail(_what, "shape (seeds >= 1, steps >= 1)", f"shape {c.shape}", described=True)
    if np.isinf(c).any() or np.isnan(c).all():   # a nan is a gap; all nan or an inf is no curve
        _validate.fail(_what, "finite values, nan only where a seed did not record a step",
                       "an inf" if np.isinf(c).any() else "nothing but nan", described=True)
    x = np.arange(c.shape[1]) if steps is None else _validate.shape("steps", _array("steps", steps), (c.shape[1],),
                                                                     "one x value per column of curves, shape")
    ax.fill_between(x, c.min(axis=0), c.max(axis=0), color=color, alpha=0.2, lw=0)
    text = None if label is None else f"{label} (median, range of {c.shape[0]} seeds)"
    ax.plot(x, np.median(c, axis=0), color=color, lw=lw, label=text)
    return ax


@checked
def strip(ax: Axes, labels: Distinct("labels", "a label", "column"), values, colors=None, reference=None,
          reference_label=None, ylabel="", log: Flag = False):
    """One column of points per label (one point per seed) with its median as a bar.

    ``values`` is a list of 1-D arrays (nan entries are left out and counted in the tick label);
    ``reference`` draws a dashed horizontal line (e.g. the paper's number).
    """
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        _validate.fail("values", "a list of 1-D arrays, one per label", values)
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
        _validate.fail("labels", "a list of labels, one per column", labels)
    if len(labels) != len(values):
        _validate.fail("labels, values", "the same length", f"{len(labels)} and {len(values)}", described=True)
    if colors is not None and (isinstance(colors, str) or len(colors) != len(labels)):
        _validate.fail("colors", f"None or a list of {len(labels)} colours (one per label)", colors)
    if reference is not None:  # a log axis cannot show a line at or below 0
        reference = _validate.real("reference", reference, low=0 if log else None, low_open=log)
    colors = [_color(f"colors[{i}]", c) for i, c in enumerate(colors)] if colors else ["0.3"] * len(labels)
    values = [_array(f"values[{i}]", v) for i, v in enumerate(values)]
    for i, (label, v) in enumerate(zip(labels, values)):
        if v.ndim > 1:
            _validate.fail(f"values[{i}]", "a 1-D array (one value per seed)", f"shape {v.shape}", described=True)
        if log and (v <= 0).any():   # a log axis would drop these points without a word
            _validate.fail(f"values[{i}]", "positive values on a log axis (log=True)", f"{v[v <= 0].min():g} in {label!r}",
                           described=True)
    ticks = []
    for i, (label, v, color) in enumerate(zip(labels, values, colors)):
        v = v.reshape(-1)
        finite = v[np.isfinite(v)]
        jitter = np.linspace(-0.12, 0.12, len(finite)) if len(finite) > 1 else np.zeros(len(finite))
        ax.scatter(i + jitter, finite, color=color, s=22, zorder=3, alpha=0.85)
        if len(finite):
            ax.plot([i - 0.25, i + 0.25], [np.median(finite)] * 2, color=color, lw=2.5, zorder=4)
        missing = len(v) - len(finite)
        ticks.append(f"{label}" + (f"\n({missing} never)" if missing else ""))   # a number is a label too
    if reference is not None:
        ax.axhline(reference, ls="--", color="black", lw=1, label=reference_label)
        if reference_label:
            ax.legend(loc="best", fontsize=8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(ticks, fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    return ax


def value_trajectories(axes, pca, colors, titles=None):
    """Draw value trajectories in a shared PCA plane, one panel per schedule.

    ``pca`` is what ``experiments.value_pca`` returns; ``colors`` maps each schedule to a colour.
    Each symbol's value W_V mu_s is a line from a hollow circle (start) to a filled one (end),
    labelled with the symbol. All panels use the same axes and limits.
    """
    _validate.record("pca", pca, ("projections", "explained"), "experiments.value_pca")
    names = list(pca["projections"])
    if not hasattr(colors, "keys") or not set(names) <= set(colors.keys()):
        _validate.fail("colors", f"a dict with a colour for each schedule {names}", colors)
    axes = list(np.atleast_1d(axes))
    if len(axes) != len(names):
        _validate.fail("axes", f"{len(names)} axes (one per schedule)", len(axes))
    if not all(hasattr(ax, "plot") for ax in axes):
        _validate.fail("axes", f"{len(names)} matplotlib Axes (fig.subplots(1, {len(names)}))", axes)
    for name, p in pca["projections"].items():
        if np.ndim(p) < 1 or np.shape(p)[-1] < 2:
            _validate.fail("pca", "experiments.value_pca(..., n_components >= 2): a plane needs two components",
                           f"projections of {name!r} of shape {np.shape(p)}", described=True)
    every = np.concatenate([p.reshape(-1, p.shape[-1]) for p in pca["projections"].values()])
    low, high = every.min(axis=0), every.max(axis=0)
    pad = 0.08 * (high - low).max()
    explained = pca["explained"]
    for ax, name in zip(axes, names):
        p = pca["projections"][name]
        for s in range(p.shape[1]):
            ax.plot(p[:, s, 0], p[:, s, 1], color=colors[name], lw=1.2, alpha=0.8)
            ax.scatter(*p[0, s, :2], facecolors="none", edgecolors=colors[name], s=18, zorder=3)
            ax.scatter(*p[-1, s, :2], color=colors[name], s=18, zorder=3)
            ax.annotate(str(s), p[-1, s, :2], textcoords="offset points", xytext=(3, 3), fontsize=7)
        ax.set_xlim(low[0] - pad, high[0] + pad)
        ax.set_ylim(low[1] - pad, high[1] + pad)
        ax.set_aspect("equal", adjustable="box")
        ax.set(xlabel=f"PC1 ({explained[0]:.0%} of variance)", ylabel=f"PC2 ({explained[1]:.0%})",
               title=(titles or {}).get(name, name))
    return axes


# ----------------------------------------------------------------------------- chapters 4-5: curves and clouds

@checked
def binned(ax: Axes, x, y, n_bins: Whole(1) = 8, by_value: Flag = False, **kwargs):
    """Mean of ``y`` in ``n_bins`` quantile bins of ``x``, drawn as a line with markers at the bins'
    mean x. For relations too noisy to read from a scatter of thousands of points.

    ``by_value=True``: one bin per distinct value of ``x`` (rounded to 4 decimals) that holds at least
    1% of the points, for an ``x`` that takes few values, where a quantile bin would mix two of them and
    put its marker at an x no point has."""
    x, y = _array("x", x).ravel(), _array("y", y).ravel()
    if x.shape != y.shape or x.size < n_bins:
        _validate.fail("x, y", f"two samples of the same size >= n_bins={n_bins}", f"{x.size} and {y.size}",
                       described=True)
    for what, a in (("x", x), ("y", y)):
        if not np.isfinite(a).all():
            _validate.fail(what, "finite values", f"{int((~np.isfinite(a)).sum())} NaN/inf entries", described=True)
    if by_value:
        values, idx, counts = np.unique(np.round(x, 4), return_inverse=True, return_counts=True)
        keep = [b for b in range(len(values)) if counts[b] >= 0.01 * x.size]
    else:
        edges = np.quantile(x, np.linspace(0, 1, n_bins + 1))
        idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, n_bins - 1)
        keep = [b for b in range(n_bins) if (idx == b).any()]
    centres = np.array([x[idx == b].mean() for b in keep])
    means = np.array([y[idx == b].mean() for b in keep])
    try:
        ax.plot(centres, means, marker="o", ms=4, **kwargs)
    except (AttributeError, TypeError) as exc:   # a misspelt line property (colour=): matplotlib names only Line2D.set
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if bad is None:
            raise
        near = _validate.near_name(bad.group(1), [n[4:] for n in dir(matplotlib.lines.Line2D) if n.startswith("set_")])
        raise TypeError(f"plots.binned(): got an unexpected keyword argument {bad.group(1)!r}"
                        f"{f'; did you mean {near!r}?' if near else ''} (its **kwargs go to ax.plot: a Line2D's "
                        "properties)") from None
    return centres, means


@checked
def trajectories(ax: Axes, paths, color, label=None, ls="-", marker="o"):
    """Paths of K points over iterations, ``paths`` of shape (n_iter + 1, K, 2): a line per point,
    a hollow marker where it starts and a filled one where it ends."""
    _color("color", color)
    try:
        matplotlib.markers.MarkerStyle(marker)
    except ValueError:
        _validate.fail("marker", "a matplotlib marker (e.g. 'o', 's', '^', 'x' or '$...$')", marker)
    p = _array("paths", paths)
    if p.ndim != 3 or p.shape[2] != 2:
        _validate.fail("paths", "shape (n_iter + 1, K, 2)", f"shape {p.shape}", described=True)
    for k in range(p.shape[1]):
        ax.plot(p[:, k, 0], p[:, k, 1], color=color, ls=ls, lw=1.4, label=label if k == 0 else None)
        ax.plot(p[0, k, 0], p[0, k, 1], marker=marker, mfc="white", mec=color, ms=6)
        ax.plot(p[-1, k, 0], p[-1, k, 1], marker=marker, color=color, ms=6)


# ----------------------------------------------------------------------------- chapter 4: the score-space kernel

@checked
def score_kernel_panels(axes: AxesList, steps, agree_gradient, agree_kernel, kernel):
    """Two panels for chapter 4's score-space kernel. Left: over training steps, the share of pairs whose
    realised score change has the sign of -dL/ds (the pair's own gradient) and of the kernel's
    first-order step -lr K dL/ds, median and range over seeds (rows of the two (seeds, steps) arrays),
    with chance (1/2) dotted. Right: ``kernel``, the (pairs, pairs) score-space kernel of one sequence,
    divided by the mean of its diagonal, on a signed scale."""
    _, axes = figure_or_axes("axes", axes, 2)
    ax = axes[0]
    seed_bands(ax, agree_gradient, COLORS["error"], r"sign of $-\partial L/\partial s_{ij}$", steps=steps,
               _what="agree_gradient")
    _validate.shape("agree_kernel", _array("agree_kernel", agree_kernel), np.shape(agree_gradient),
                    "the shape of agree_gradient (seeds, steps):")
    seed_bands(ax, agree_kernel, COLORS["query"], r"sign of the first-order step $-\eta \mathcal{K} \nabla_s L$",
               steps=steps, _what="agree_kernel")
    ax.axhline(0.5, color="0.5", ls=":", lw=1)
    ax.set(title="realised $\\Delta s_{ij}$ agrees in sign with ...", xlabel="step t", ylabel="share of pairs",
           ylim=(0.4, 1.03))
    ax.legend(fontsize=8, loc="center right")
    k = to_numpy(kernel)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        _validate.fail("kernel", "a square (pairs, pairs) matrix", f"shape {k.shape}", described=True)
    if not np.isfinite(k).all() or not np.abs(np.diag(k)).mean() > 0:
        _validate.fail("kernel", "a finite kernel with a nonzero diagonal (it is divided by its mean)", k)
    k = k / np.abs(np.diag(k)).mean()
    bound = float(np.abs(k).max())
    im = axes[1].imshow(k, cmap="RdBu_r", vmin=-bound, vmax=bound, interpolation="nearest")
    axes[1].set(title="score-space kernel of one sequence / its mean diagonal", xlabel="pair (i, j)", ylabel="pair (i', j')")
    plt.colorbar(im, ax=axes[1], fraction=0.046, pad=0.04)
    return axes


# ----------------------------------------------------------------------------- chapters 4 and 5: one head on the hidden sources

@checked
def specialisation_curves(fig: Figure, runs: Sequence[Run], color=None, label=None, axes: AxesList | None = None):
    """Four panels over training: probe loss and its KL to the Bayes posterior; attention entropy;
    attended compatibility; share of value variance in the first K-1 principal components."""
    runs = specialisation._check_runs(runs)
    if axes is not None:
        _, axes = figure_or_axes("axes", axes, 4)
    color = color or COLORS["em" if runs[0].cfg.value_ratio != 1 else "sgd"]
    if axes is None:
        axes = fig.subplots(1, 4)
    steps, _ = specialisation.curves(runs, "loss")
    seed_bands(axes[0], specialisation.curves(runs, "kl_bits")[1], color, label, steps)
    axes[0].set(title="distance to the Bayes posterior", ylabel="KL (bits)", xlabel="step")
    seed_bands(axes[1], specialisation.curves(runs, "attn_entropy")[1], color, label, steps)
    uniform, ideal = specialisation.reference_entropies(runs[0])
    axes[1].axhline(uniform, color="0.6", ls=":", lw=1)
    axes[1].axhline(ideal, color="0.6", ls="--", lw=1)
    axes[1].text(steps[-1], uniform, "uniform", ha="right", va="bottom", fontsize=8, color="0.4")
    axes[1].text(steps[-1], ideal, "ideal routing", ha="right", va="bottom", fontsize=8, color="0.4")
    axes[1].set(title="attention entropy", ylabel="nats", xlabel="step")
    seed_bands(axes[2], specialisation.curves(runs, "compat_cos")[1], color, label, steps)
    axes[2].axhline(0, color="0.6", lw=0.8)
    axes[2].set(title=r"attended compatibility $E_\alpha[\cos(u_i, v_j)]$", xlabel="step")
    seed_bands(axes[3], specialisation.curves(runs, "value_pc_share")[1], color, label, steps)
    axes[3].set(title=f"value variance in first {runs[0].task.n_sources - 1} PCs", xlabel="step", ylim=(0, 1.02))
    if label:
        axes[0].legend(fontsize=8)
    return axes


@checked
def value_manifold(axes: AxesList, before: dict, after: dict, n_bins=8):
    """Value clouds before and after training (PC plane, coloured by posterior entropy), and the mean
    entropy as a function of the distance from the centre."""
    _, axes = figure_or_axes("axes", axes, 3)
    for what, m in (("before", before), ("after", after)):
        _validate.record(what, m, ("projected", "share", "entropy", "radius", "spearman"), "specialisation.manifold")
    vmax = float(np.log(before["projected"].shape[1] + 1))  # log K: K - 1 components were kept
    for ax, m, title in ((axes[0], before, "values at initialisation"), (axes[1], after, "values after training")):
        order = np.argsort(-m["entropy"])  # low-entropy points on top
        sc = ax.scatter(m["projected"][order, 0], m["projected"][order, 1], c=m["entropy"][order], s=4,
                        cmap="viridis", vmin=0, vmax=vmax, rasterized=True)
        ax.set(title=f"{title}\n{m['share']:.0%} of variance in the first 2 PCs", xlabel="PC 1", ylabel="PC 2")
        ax.set_aspect("equal", adjustable="datalim")
    plt.colorbar(sc, ax=axes[1], fraction=0.046, pad=0.04, label="posterior entropy of $x_j$ alone (nats)")
    for m, color, label in ((before, "0.6", "initialisation"), (after, COLORS["value"], "trained")):
        binned(axes[2], m["radius"] / m["radius"].mean(), m["entropy"], n_bins, color=color,
               label=f"{label} (Spearman {m['spearman']:.2f})")
    axes[2].set(title="entropy against distance from the centre", xlabel="distance in the PC plane / its mean",
                ylabel="mean posterior entropy (nats)")
    axes[2].legend(fontsize=8)


def signal_attention_maps(axes, alphas, is_signal, titles):
    """Attention maps of one sequence, with the signal positions marked on the key axis."""
    if getattr(alphas, "ndim", None) == 2:   # one map: its rows would pass for maps
        _validate.fail("alphas", "a list of (T, T) attention maps, one per axis ([alpha] for a single map)", alphas)
    alphas, titles = list(alphas), list(titles)
    if is_signal is None:
        _validate.fail("is_signal", "one flag per position (True where the observation is a signal)", is_signal)
    _, axes = figure_or_axes("axes", axes, len(alphas))
    if len(titles) != len(alphas):
        _validate.fail("titles", f"{len(alphas)} titles (one per map)", len(titles))
    flags = _array("is_signal", is_signal).ravel()
    for ax, alpha, title in zip(axes, alphas, titles):
        a = _array("alphas", alpha, ndim=2, expected="(T, T) attention maps")
        if a.shape != (len(flags), len(flags)):
            _validate.fail("alphas", f"(T, T) maps with T = {len(flags)} (one flag of is_signal per position)", a)
        _validate.distributions("alphas", torch.from_numpy(a), expected="attention maps, rows of probabilities (entries in [0, 1] "
                                "summing to 1), not raw scores")
        im = ax.imshow(np.ma.masked_where(np.triu(np.ones_like(a), 1) > 0, a), cmap="viridis", vmin=0)
        im.cmap.set_bad("0.92")
        T = a.shape[0]
        ax.set_xticks(range(T))
        ax.set_xticklabels(["S" if s else "·" for s in flags.tolist()], fontsize=7)
        for tick, s in zip(ax.get_xticklabels(), flags.tolist()):
            tick.set_color(COLORS["value"] if s else "0.5")
        ax.set(title=title, xlabel="key j (S: signal position)", ylabel="query i")
        plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)


@checked
def one_step_loop(axes: AxesList, runs: Sequence[Run], example=0):
    """Left: for one run, the advantage flow into the signal positions at step t and the realised
    change of attention mass on them from t to t+1. Right: per-pair and per-prototype agreement of
    prediction and realised step over training, median and min-max band over seeds."""
    _, axes = figure_or_axes("axes", axes, 2)
    runs = specialisation._check_runs(runs)
    r = runs[_validate.integer("example", example, 0, len(runs) - 1)]
    for x in runs:
        if "step" not in x.loop:
            _validate.fail("runs", "runs with loop measurements (run with loop_every > 0)",
                           f"the run with seed {x.seed}, which has none", described=True)
    steps = r.loop["step"]
    ax = axes[0]
    ax.plot(steps, r.loop["flow"] / np.abs(r.loop["flow"]).max(), color=COLORS["key"],
            label="advantage flow into signal keys at t")
    ax.plot(steps, r.loop["dmass"] / np.abs(r.loop["dmass"]).max(), color=COLORS["query"], ls="--",
            label="change of attention mass on them, t to t+1")
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set(title=f"routing, seed {r.seed} (each curve / its max)", xlabel="step t")
    ax.legend(fontsize=8)
    ax = axes[1]
    for key, color, label in (("prototype_cos", COLORS["value"], r"cos(move of $W_V\mu_z$, its pull)"),
                              ("attn_pair_corr", COLORS["key"], r"corr(predicted, realised $\Delta\alpha_{ij}$)"),
                              ("value_pair_corr", COLORS["error"], r"corr($\alpha_{ij}$, move of $v_j$ along $-u_i$)")):
        seed_bands(ax, np.stack([x.loop[key] for x in runs]), color, label, steps)
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set(title="one step: prediction against what happened", xlabel="step t", ylim=(-1.05, 1.05))
    ax.legend(fontsize=8, loc="lower left")


# ----------------------------------------------------------------------------- chapter 6: EM-like against SGD

@checked
def sticky_em_vs_sgd(fig: Figure, result: EMvsSGDResult):
    """Loss curves (both schedules, exact Bayes level, held-out loss of the final weights as
    diamonds at the right edge) and the speed-up per seed, on ``fig``."""
    ax_loss, ax_speed = fig.subplots(1, 2, gridspec_kw={"width_ratios": (2.2, 1)})
    seed_bands(ax_loss, result.loss_sgd, COLORS["sgd"], f"SGD, lr {result.lr:g}")
    seed_bands(ax_loss, result.loss_em, COLORS["em"], f"EM-like, $W_V$ lr x{result.value_ratio:g}")
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


@checked
def message(fig: Figure, text):
    """A figure that says ``text`` instead of drawing (e.g. why a widget's run diverged)."""
    ax = fig.subplots()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize=10)
    return ax


def _ladder_rows(rows, group):
    """Each row a dict with a parameter count and its ``group`` key."""
    for i, r in enumerate(rows):
        missing = sorted({"n_params", group} - set(r)) if isinstance(r, dict) else None
        if missing is None or missing:
            _validate.fail(f"rows[{i}]", f"a dict with the keys 'n_params' and {group!r}",
                           f"a dict without {missing}" if missing else type(r).__name__, described=True)
        _validate.integer(f"rows[{i}]['n_params']", r["n_params"], 1)


def _number_of(value, row):
    """value(row) as a float; a function that fails on a row, or returns no number, is named."""
    try:
        return float(value(row))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        _validate.fail("value", "a function row -> number, e.g. lambda r: r['kl_bits']",
                       f"one that raised {type(exc).__name__}: {exc} on a row with keys {sorted(row)}", described=True)


@checked
def ladder(ax: Axes, rows, value, group="task", colors=None, ylabel="", log_y: Flag = False, labels=None):
    """One panel of the size ladder: ``value(row)`` against the parameter count (log scale), one
    point per run and a line through the mean of each rung, one colour per ``group`` (rows from
    ``converged.ladder_rows``). ``labels`` maps a group to its legend text."""
    if not isinstance(rows, (list, tuple)) or not rows:
        _validate.fail("rows", "a non-empty list of row dicts (converged.ladder_rows)", rows)
    _validate.function("value", value, "a function row -> number, e.g. lambda r: r['kl_bits']")
    _ladder_rows(rows, group)
    for what, given in (("colors", colors), ("labels", labels)):
        if given is not None and not isinstance(given, Mapping):
            _validate.fail(what, f"None or a dict {{{group}: {what[:-1]}}}, e.g. {{'recall': ...}}", given)
    colors = {g: _color(f"colors[{g!r}]", c) for g, c in (colors or {}).items()}
    groups = list(dict.fromkeys(r[group] for r in rows))
    palette = list(OKABE_ITO.values())
    for i, g in enumerate(groups):
        color = colors.get(g, palette[i % len(palette)])
        mine = [r for r in rows if r[group] == g]
        x = np.array([r["n_params"] for r in mine], dtype=float)
        y = np.array([_number_of(value, r) for r in mine], dtype=float)
        if log_y and (y <= 0).any():   # a log axis would drop these points without a word (as strip refuses)
            _validate.fail("value", "positive values on a log axis (log_y=True)", f"{y[y <= 0].min():g} for {g!r}",
                           described=True)
        ax.scatter(x, y, s=14, color=color, alpha=0.7)
        rungs = sorted(set(x))
        ax.plot(rungs, [y[x == n].mean() for n in rungs], color=color, lw=1.4, marker="o", ms=3,
                label=(labels or {}).get(g, g))
    ax.set_xscale("log")
    # ticks at 1, 2 and 5 of each decade, in thousands (log-scale minor labels would run into each other)
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda n, _: f"{n / 1000:g}k"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    if log_y:
        ax.set_yscale("log")
    ax.set(xlabel="parameters", ylabel=ylabel)
