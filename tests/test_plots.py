"""The figure helpers of bayesattn_lite.plots: they draw what they are given, where they say they do."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bayesattn_lite import plots  # noqa: E402


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def quiver_of(ax, color):
    """The arrows (offsets, vectors) that ``ax`` holds in ``color``."""
    rgba = matplotlib.colors.to_rgba(color)
    for q in ax.collections:
        if isinstance(q, matplotlib.quiver.Quiver) and np.allclose(q.get_facecolor()[0][:3], rgba[:3]):
            return q.get_offsets(), np.column_stack([q.U, q.V])
    raise AssertionError(f"no quiver in {color}")


def test_heatmap_shows_the_matrix_and_writes_its_values(ax):
    m = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.float64)
    im = plots.heatmap(ax, m, title="t", signed=True, fmt="{:.1f}")
    assert np.allclose(im.get_array(), m.numpy())
    assert im.get_clim() == (-3.0, 3.0)  # signed: symmetric around 0
    assert sorted(t.get_text() for t in ax.texts) == ["-2.0", "0.5", "1.0", "3.0"]


def test_heatmap_mask_greys_out_entries_and_skips_their_text(ax):
    m = np.arange(4.0).reshape(2, 2)
    mask = np.array([[0, 1], [0, 0]])
    im = plots.heatmap(ax, m, mask=mask, fmt="{:.0f}")
    assert im.get_array().mask[0, 1] and not im.get_array().mask[1, 1]
    assert sorted(t.get_text() for t in ax.texts) == ["0", "2", "3"]


def test_arrows_draw_one_scaled_step_per_point(ax):
    p = np.array([[0.0, 0.0], [1.0, 2.0]])
    d = np.array([[1.0, 0.0], [0.0, -1.0]])
    plots.arrows(ax, p, d, "tab:red", label="pts", scale=-0.5, annotate="p{}")
    offsets, vectors = quiver_of(ax, "tab:red")
    assert np.allclose(offsets, p) and np.allclose(vectors, -0.5 * d)
    assert [t.get_text() for t in ax.texts] == ["p0", "p1"]


def example(T=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(T, 2, generator=gen, dtype=torch.float64) for _ in range(5)]


def inside(ax, points):
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    return np.all((points[:, 0] >= x0) & (points[:, 0] <= x1) & (points[:, 1] >= y0) & (points[:, 1] <= y1))


def test_qk_step_draws_minus_lr_times_the_gradients_on_equal_axes(ax):
    q, k, dq, dk, _ = example()
    plots.qk_step(ax, q, k, dq, dk, lr=2.0)
    for color, points, grad in ((plots.COLORS["query"], q, dq), (plots.COLORS["key"], k, dk)):
        offsets, vectors = quiver_of(ax, color)
        assert np.allclose(offsets, points.numpy()) and np.allclose(vectors, -2.0 * grad.numpy())
        assert inside(ax, (points - 2.0 * grad).numpy()), "every arrow tip is within the axes"
    assert ax.get_aspect() == 1.0
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("query" in s for s in labels) and any("key" in s for s in labels)
    assert sorted(t.get_text() for t in ax.texts) == sorted([f"$q_{{{n}}}$" for n in range(3)]
                                                          + [f"$k_{{{n}}}$" for n in range(3)])


def test_value_step_draws_values_error_signals_and_class_directions(ax):
    v, dv, u, _, _ = example()
    readout = torch.tensor([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]], dtype=torch.float64)
    plots.value_step(ax, v, dv, u, lr=0.5, readout=readout, u_scale=3)
    offsets, vectors = quiver_of(ax, plots.COLORS["value"])
    assert np.allclose(offsets, v.numpy()) and np.allclose(vectors, -0.5 * dv.numpy())
    offsets, vectors = quiver_of(ax, plots.COLORS["error"])
    assert np.allclose(offsets, 0) and np.allclose(vectors, 3 * u.numpy())
    assert inside(ax, readout.numpy()) and inside(ax, 3 * u.numpy())
    assert ax.get_aspect() == 1.0
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(r"\times3" in s for s in labels), "the legend states the scale of u"
    assert sum(t.get_text().startswith("class") for t in ax.texts) == 3


@pytest.mark.parametrize("bad", [torch.zeros(3, 3), torch.zeros(3)])
def test_plane_helpers_refuse_points_that_are_not_2d(ax, bad):
    q, k, dq, dk, _ = example()
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        plots.qk_step(ax, bad, k, dq, dk, lr=1.0)
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        plots.value_step(ax, bad, dq, q, lr=1.0)


def test_qk_step_refuses_gradients_of_another_shape(ax):
    q, k, dq, dk, _ = example()
    with pytest.raises(ValueError, match="must match"):
        plots.qk_step(ax, q, k, dq[:2], dk, lr=1.0)


def test_score_kernel_panels_draw_the_agreement_and_the_kernel():
    fig, axes = plt.subplots(1, 2)
    steps = np.arange(0, 50, 10)
    agree = np.full((3, 5), 0.6)
    kernel = np.array([[2.0, -1.0], [-1.0, 4.0]])
    plots.score_kernel_panels(axes, steps, agree, agree + 0.3, kernel)
    assert len(axes[0].lines) >= 3  # two medians and the chance line
    assert np.allclose(axes[1].images[0].get_array(), kernel / 3.0)
    with pytest.raises(ValueError, match="square"):
        plots.score_kernel_panels(axes, steps, agree, agree, np.ones((2, 3)))
    plt.close(fig)


def test_ladder_draws_each_run_and_a_line_through_each_rungs_mean(ax):
    rows = [{"task": t, "n_params": n, "kl": kl} for t, n, kl in
            [("a", 100, 1.0), ("a", 100, 3.0), ("a", 400, 0.5), ("b", 100, 2.0), ("b", 400, 1.0)]]
    plots.ladder(ax, rows, lambda r: r["kl"], ylabel="KL", log_y=True, labels={"a": "task a"})
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["task a", "b"]
    np.testing.assert_allclose(lines[0].get_ydata(), [2.0, 0.5])     # the mean of each rung
    assert len(ax.collections) == 2 and ax.get_xscale() == "log" and ax.get_yscale() == "log"


# ----------------------------------------------------------------------------- bad inputs: a clear error naming the argument

P3, G3 = torch.zeros(3, 2), torch.ones(3, 2)
ROW = {"task": "a", "n_params": 100, "kl": 1.0}
BAD_CALLS = [  # (call on a fresh Axes, the argument the message must name)
    (lambda ax: plots.heatmap("ax", torch.eye(3)), "ax"),
    (lambda ax: plots.heatmap(None, torch.eye(3)), "ax"),
    (lambda ax: plots.heatmap(ax, torch.randn(3)), "matrix"),
    (lambda ax: plots.heatmap(ax, torch.randn(2, 3, 4)), "matrix"),
    (lambda ax: plots.heatmap(ax, "matrix"), "matrix"),
    (lambda ax: plots.heatmap(ax, torch.zeros(0, 0)), "matrix"),
    (lambda ax: plots.heatmap(ax, torch.eye(3), mask=torch.ones(2, 2, dtype=torch.bool)), "mask"),
    (lambda ax: plots.heatmap(ax, torch.eye(3), fmt=3), "fmt"),
    (lambda ax: plots.arrows(ax, P3, torch.ones(4, 2), "red"), "points, deltas"),
    (lambda ax: plots.arrows(ax, torch.zeros(3), torch.ones(3), "red"), "points"),
    (lambda ax: plots.arrows(ax, P3, G3, "notacolor"), "color"),
    (lambda ax: plots.arrows(ax, P3, G3, "red", scale=float("nan")), "scale"),
    (lambda ax: plots.qk_step(ax, P3, P3, G3, G3, -0.1), "lr"),
    (lambda ax: plots.qk_step(ax, P3, P3, G3, G3, "lr"), "lr"),
    (lambda ax: plots.value_step(ax, P3, G3, G3, float("nan")), "lr"),
    (lambda ax: plots.value_step(ax, P3, G3, G3, 0.1, u_scale=0), "u_scale"),
    (lambda ax: plots.seed_bands(ax, torch.randn(2, 5), "red", "x", steps=np.arange(3)), "steps"),
    (lambda ax: plots.seed_bands(ax, "curves", "red", "x"), "curves"),
    (lambda ax: plots.seed_bands(ax, np.zeros((0, 5)), "red", "x"), "curves"),
    (lambda ax: plots.strip(ax, ["a"], "v"), "values"),
    (lambda ax: plots.strip(ax, ["a"], [np.ones(3)], log=True, reference=-1.0), "reference"),
    (lambda ax: plots.strip(ax, ["a"], [np.ones(3)], colors=["red", "blue"]), "colors"),
    (lambda ax: plots.strip(ax, ["a"], [np.ones(3)], colors=["notacolor"]), r"colors\[0\]"),
    (lambda ax: plots.strip(ax, ["a"], [["x"]]), r"values\[0\]"),
    (lambda ax: plots.binned(ax, np.arange(5), np.arange(5), n_bins=0), "n_bins"),
    (lambda ax: plots.binned(ax, np.arange(5), np.arange(5), n_bins=2.5), "n_bins"),
    (lambda ax: plots.trajectories(ax, "paths", "red"), "paths"),
    (lambda ax: plots.ladder(ax, "rows", lambda r: r["kl"]), "rows"),
    (lambda ax: plots.ladder(ax, [], lambda r: r["kl"]), "rows"),
    (lambda ax: plots.ladder(ax, [ROW], "kl"), "value"),
    (lambda ax: plots.ladder(ax, [{"task": "a", "kl": 1.0}], lambda r: r["kl"]), r"rows\[0\]"),
    (lambda ax: plots.message("fig", "hello"), "fig"),
    (lambda ax: plots.to_numpy("abc"), "a"),
    (lambda ax: plots.value_trajectories([ax], "pca", {"a": "red"}), "pca"),
    (lambda ax: plots.value_trajectories([ax], {"projections": {"a": np.zeros((2, 3, 2))}, "explained": [0.5, 0.3]},
                                         {"b": "red"}), "colors"),
]


@pytest.mark.parametrize("call, name", BAD_CALLS)
def test_bad_inputs_are_refused_naming_the_argument(ax, call, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        call(ax)


@pytest.mark.parametrize("row, group, missing", [({"task": "a", "kl": 1.0}, "task", "n_params"), (ROW, "arch", "arch")])
def test_ladder_names_the_key_a_row_lacks(ax, row, group, missing):
    with pytest.raises(ValueError, match=rf"^rows\[0\]: expected .* without \['{missing}'\]"):
        plots.ladder(ax, [row], lambda r: r["kl"], group=group)


def test_edge_calls_that_are_valid_still_draw(ax):
    plots.heatmap(ax, torch.eye(2, dtype=torch.long))                      # integer matrices are drawn as floats
    plots.arrows(ax, np.zeros((1, 2)), np.ones((1, 2)), "red", scale=np.float32(-2))  # any finite scale
    plots.binned(ax, np.arange(3), np.arange(3), n_bins=np.int64(1))
    plots.strip(ax, ["a"], [np.array([1.0, float("nan")])], reference=0.0)  # a linear axis shows 0
    assert plots.message(plt.figure(), 123).texts[0].get_text() == "123"  # anything printable is said
    plt.close("all")


@pytest.mark.parametrize("fmt", ["%.2f", "{x}", "{:d}", 3])
def test_heatmap_refuses_a_format_that_would_not_write_the_values(fmt):
    """"%.2f" used to print itself in every cell; a format must have one {} field for the value."""
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=r'fmt: expected None or a format string with one \{\} field'):
        plots.heatmap(ax, np.eye(2), "t", fmt=fmt)
    plt.close(fig)


def test_strip_takes_numbers_as_labels():
    fig, ax = plt.subplots()
    plots.strip(ax, [1, 2], [[1.0], [2.0]])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]
    plt.close(fig)


def test_value_trajectories_name_what_does_not_fit_a_plane():
    pca = {"projections": {"a": np.zeros((3, 2, 1)), "b": np.zeros((3, 2, 1))}, "explained": [0.5]}
    with pytest.raises(ValueError, match=r"^pca: expected experiments.value_pca\(\.\.\., n_components >= 2\)"):
        plots.value_trajectories(plt.subplots(1, 2)[1], pca, {"a": "red", "b": "blue"})
    with pytest.raises(ValueError, match=r"^axes: expected 2 matplotlib Axes"):
        plots.value_trajectories(["x", "y"], {**pca, "projections": {k: np.zeros((3, 2, 2)) for k in "ab"}},
                                 {"a": "red", "b": "blue"})
    plt.close("all")


@pytest.mark.parametrize("curves, said", [([[1.0, np.inf]], "an inf"), ([[np.nan, np.nan]], "nothing but nan"),
                                          (np.zeros((2, 0)), r"shape \(2, 0\)")])
def test_seed_bands_refuses_curves_with_nothing_to_draw(ax, curves, said):
    with pytest.raises(ValueError, match=f"curves: expected .*got {said}"):
        plots.seed_bands(ax, curves, "C0", "x")


@pytest.mark.parametrize("call, match", [
    (lambda ax: plots.score_kernel_panels(plt.subplots(1, 2)[1], np.arange(4), np.full((2, 4), 0.6),
                                          np.full((3, 4), 0.6), np.eye(3)),
     r"agree_kernel: expected the shape of agree_gradient \(seeds, steps\): \(2, 4\), got \(3, 4\)"),
    (lambda ax: plots.signal_attention_maps(plt.subplots(1, 2)[1], [5 * torch.randn(4, 4), torch.randn(4, 4)],
                                            torch.ones(4).bool(), ["a", "b"]),
     r"alphas: expected attention maps, rows of probabilities .*not raw scores"),
    (lambda ax: plots.trajectories(ax, np.zeros((4, 3, 2)), "red", marker="Q"), "marker: expected a matplotlib marker"),
    (lambda ax: plots.ladder(ax, [ROW], lambda r: r["kl"], colors={"a": "nocolour"}),
     r"colors\['a'\]: expected a matplotlib colour"),
])
def test_shapes_maps_markers_and_colours_are_refused_naming_the_argument(ax, call, match):
    with pytest.raises(ValueError, match=match):
        call(ax)


def test_binned_names_a_misspelt_line_property_and_the_one_meant(ax):
    with pytest.raises(TypeError, match=r"plots.binned\(\): .* keyword argument 'colour'; did you mean 'color'\?"):
        plots.binned(ax, np.arange(20.0), np.arange(20.0), colour="red")
    plots.binned(ax, np.arange(20.0), np.arange(20.0), color="red", lw=1.2)   # the notebooks' keywords still pass
