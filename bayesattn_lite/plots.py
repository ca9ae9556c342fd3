"""Figure helpers shared by the chapters, so every chapter draws the same things the same way."""

import matplotlib.pyplot as plt
import numpy as np
import torch

# One colour per role, used in every chapter.
COLORS = {
    "query": "tab:blue", "key": "tab:orange", "value": "tab:green", "error": "tab:red",
    "sgd": "tab:gray", "em": "tab:purple",
}


def style():
    """The course's figure style: small, legible, no top/right spines."""
    plt.rcParams.update({
        "figure.figsize": (6.0, 3.6), "figure.dpi": 100, "font.size": 10,
        "axes.titlesize": 10, "axes.labelsize": 10, "axes.spines.top": False,
        "axes.spines.right": False, "legend.frameon": False, "image.cmap": "viridis",
    })


def to_numpy(a):
    """A CPU float64 numpy copy of a tensor or array (figures never hold tensors)."""
    if isinstance(a, torch.Tensor):
        a = a.detach().to("cpu", torch.float64).numpy()
    return np.asarray(a, dtype=float)


def heatmap(ax, matrix, title="", signed=False, mask=None, fmt=None, xlabel="key j", ylabel="query i"):
    """Draw a (T, T) matrix; ``signed`` centres a red-blue scale on zero; ``mask`` greys entries out.

    ``fmt`` (e.g. "{:.2f}") writes each value in its cell, for small matrices.
    """
    m = to_numpy(matrix)
    shown = np.ma.masked_where(to_numpy(mask) > 0, m) if mask is not None else m
    if signed:
        bound = max(float(np.abs(m if mask is None else np.where(to_numpy(mask) > 0, 0, m)).max()), 1e-12)
        im = ax.imshow(shown, cmap="RdBu_r", vmin=-bound, vmax=bound)
    else:
        im = ax.imshow(shown, cmap="viridis")
    im.cmap.set_bad("0.9")
    if fmt is not None:
        for (i, j), value in np.ndenumerate(m):
            if mask is None or not to_numpy(mask)[i, j]:
                ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=7)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.set_xticks(range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]))
    plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return im


def arrows(ax, points, deltas, color, label=None, scale=1.0, annotate=None):
    """Points in 2-D with an arrow from each to point + scale * delta (one gradient step)."""
    p, d = to_numpy(points), to_numpy(deltas) * scale
    ax.scatter(p[:, 0], p[:, 1], color=color, s=30, label=label, zorder=3)
    ax.quiver(p[:, 0], p[:, 1], d[:, 0], d[:, 1], color=color, angles="xy", scale_units="xy",
              scale=1.0, width=0.006, zorder=2)
    for n, (px, py) in enumerate(p):
        if annotate:
            ax.annotate(annotate.format(n), (px, py), textcoords="offset points", xytext=(4, 4), fontsize=8)


# ----------------------------------------------------------------------------- one step in a 2-D plane

def _as_plane_points(name, a):
    """A (n, 2) float64 numpy array, or a ValueError that says what was expected."""
    p = to_numpy(a)
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"{name}: expected shape (n, 2) (points in a plane), got {p.shape}")
    return p


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
    ax.legend(loc=legend_loc, fontsize=8)
    return ax


def qk_step(ax, q, k, dq, dk, lr, title="queries and keys: one gradient step", legend_loc="best"):
    """Queries and keys in a 2-D key space, each with an arrow for its step ``-lr * gradient``.

    ``q``, ``k`` are (T, 2) (d_k = 2) and ``dq``, ``dk`` their gradients dL/dq, dL/dk. The arrows
    are drawn at true length (the step itself), on equal axes, so angles can be read off.
    """
    q, k = _as_plane_points("q", q), _as_plane_points("k", k)
    dq, dk = _as_plane_points("dq", dq), _as_plane_points("dk", dk)
    if dq.shape != q.shape or dk.shape != k.shape:
        raise ValueError(f"gradients must match their points: q {q.shape} vs dq {dq.shape}, "
                         f"k {k.shape} vs dk {dk.shape}")
    arrows(ax, q, dq, COLORS["query"], label=r"query $q_i$, arrow $-\eta\,\partial L/\partial q_i$",
           scale=-lr, annotate="$q_{{{}}}$")
    arrows(ax, k, dk, COLORS["key"], label=r"key $k_j$, arrow $-\eta\,\partial L/\partial k_j$",
           scale=-lr, annotate="$k_{{{}}}$")
    return _finish_plane(ax, [q, k, q - lr * dq, k - lr * dk], title, legend_loc)


def value_step(ax, v, dv, u, lr, readout=None, u_scale=1.0,
               title="values: one gradient step", legend_loc="best"):
    """Values in a 2-D value space with arrows ``-lr * dL/dv_j``, and the error signals u_i.

    ``v``, ``dv``, ``u`` are (T, 2) (d_v = 2). Each u_i is drawn from the origin, multiplied by
    ``u_scale`` (stated in the legend) so it is visible next to the values. ``readout`` (C, 2),
    when given, is W_O: its rows, the class directions, are drawn as dashed grey lines.
    """
    v, dv, u = (_as_plane_points(name, a) for name, a in (("v", v), ("dv", dv), ("u", u)))
    if dv.shape != v.shape:
        raise ValueError(f"dv must match v: {v.shape} vs {dv.shape}")
    shown = [v, v - lr * dv, u * u_scale]
    if readout is not None:
        w = _as_plane_points("readout", readout)
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
    for n, (ux, uy) in enumerate(u * u_scale):
        ax.annotate(f"$u_{{{n}}}$", (ux, uy), textcoords="offset points", xytext=(3, -9),
                    fontsize=8, color=COLORS["error"])
    arrows(ax, v, dv, COLORS["value"], label=r"value $v_j$, arrow $-\eta\,\partial L/\partial v_j$",
           scale=-lr, annotate="$v_{{{}}}$")
    return _finish_plane(ax, shown, title, legend_loc)
