"""The chapters' widget panels: their compute functions agree with the package, their figures
build without a display, and moving a control changes what they show."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from bayesattn_lite import attention, widgets  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_default_state_agrees_with_attention_score_gradient():
    state = widgets.default_advantage_state()
    alpha = torch.tensor(state["alpha"], dtype=torch.float64)
    b = torch.tensor(state["b"], dtype=torch.float64)
    ds, advantage = attention.score_gradient(alpha, b)
    np.testing.assert_allclose(state["ds"], ds.numpy(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(state["advantage"], advantage.numpy(), rtol=0, atol=1e-15)
    np.testing.assert_allclose(state["alpha"], torch.softmax(torch.tensor(state["scores"]), -1).numpy(),
                               rtol=0, atol=1e-15)
    np.testing.assert_allclose(state["b"], state["values"] @ state["u"], rtol=0, atol=1e-15)


def test_state_gradient_is_autograd_of_the_linearised_loss():
    """For one query, dL = u_i . dg_i, so L(s) = u_i . sum_j softmax(s)_j v_j has the same dL/ds."""
    state = widgets.default_advantage_state()
    s = torch.tensor(state["scores"], dtype=torch.float64, requires_grad=True)
    values = torch.tensor(state["values"], dtype=torch.float64)
    u = torch.tensor(state["u"], dtype=torch.float64)
    (torch.softmax(s, -1) @ values @ u).backward()
    np.testing.assert_allclose(state["ds"], s.grad.numpy(), rtol=0, atol=1e-15)


def test_state_is_consistent():
    state = widgets.advantage_state(eta=0.5)
    assert abs(state["ds"].sum()) < 1e-15                     # zero-sum
    assert abs(state["delta_alpha"].sum()) < 1e-15            # weights still sum to 1
    np.testing.assert_allclose(state["ds"], -state["alpha"] * state["advantage"], atol=1e-15)
    np.testing.assert_allclose(state["expected_b"], state["u"] @ state["g"], atol=1e-15)
    np.testing.assert_allclose(state["scores_next"], state["scores"] - 0.5 * state["ds"], atol=1e-15)
    assert state["advantage"].max() > 0 > state["advantage"].min()  # the default shows both signs
    # descent lowers the attended mean compatibility (the loss, to first order)
    assert state["alpha_next"] @ state["b"] < state["alpha"] @ state["b"]


def test_eta_zero_changes_nothing():
    state = widgets.advantage_state(eta=0.0)
    assert np.array_equal(state["alpha_next"], state["alpha"])


def test_moving_a_value_changes_the_state():
    before = widgets.advantage_state()
    values = np.array(widgets.DEFAULT_VALUES)
    values[widgets.DEFAULT_MOVED] = (1.0, 1.0)  # now along u_i: a large b, a negative advantage
    after = widgets.advantage_state(values=values)
    j = widgets.DEFAULT_MOVED
    assert before["advantage"][j] > 0 > after["advantage"][j]
    assert before["delta_alpha"][j] > 0 > after["delta_alpha"][j]


def test_mismatched_inputs_are_explained():
    with pytest.raises(ValueError, match="scores"):
        widgets.advantage_state(scores=(0.0, 1.0))


def test_panel_builds_on_a_figure_and_on_axes():
    state = widgets.default_advantage_state()
    axes = widgets.draw_advantage_panel(plt.figure(figsize=(10, 5.4)), state)
    assert len(axes) == 5
    assert len(axes[1].patches) == len(state["alpha"])   # one bar per position
    fig, given = plt.subplots(1, 5, figsize=(15, 3))
    assert widgets.draw_advantage_panel(given, state, moved=None) == list(given)
    with pytest.raises(ValueError, match="5 Axes"):
        widgets.draw_advantage_panel(given[:2], state)


def test_explorer_constructs_without_a_display_and_reacts_to_its_sliders():
    explorer = widgets.advantage_explorer()
    *sliders, output = explorer.children
    assert len(sliders) == 4
    default = widgets.default_advantage_state()
    assert explorer.result is not None, "the panel's callback failed"
    np.testing.assert_allclose(explorer.result["ds"], default["ds"], atol=1e-12)
    np.testing.assert_allclose(explorer.result["u"], default["u"], atol=1e-12)

    v_x, v_y, u_angle, eta = sliders
    v_x.value, v_y.value = 1.0, 1.0  # move v_j along u_i
    j = widgets.DEFAULT_MOVED
    np.testing.assert_allclose(explorer.result["values"][j], (1.0, 1.0))
    assert explorer.result["advantage"][j] < 0 < default["advantage"][j]

    u_angle.value = u_angle.value + 180.0 if u_angle.value < 0 else u_angle.value - 180.0  # flip u_i
    np.testing.assert_allclose(explorer.result["u"], -default["u"], atol=1e-12)

    eta.value = 0.0
    assert np.array_equal(explorer.result["alpha_next"], explorer.result["alpha"])
    assert plt.get_fignums() == []  # the widget closes the figures it draws


# ----------------------------------------------------------------------------- training snapshots (chapter 4)

def _snapshot_states():
    from bayesattn_lite import specialisation as sp
    cfg = sp.Config(n_train=32, n_probe=4, steps=20, log_every=10, lr=0.5)
    snaps = sp.parameter_snapshots(cfg, 0, [0, 10, 20])
    _, _, (xp, yp, signal) = sp.make_data(cfg, 0)
    return snaps, widgets.snapshot_states(snaps, xp[0], yp[0], signal[0]), xp[0]


def test_snapshot_states_agree_with_the_head():
    snaps, states, x = _snapshot_states()
    assert list(states["steps"]) == [0, 10, 20]
    fw = attention.forward(x, snaps[10])
    np.testing.assert_allclose(states["alpha"][1], fw["alpha"].double().numpy(), atol=1e-6)
    np.testing.assert_allclose(states["values"][2], attention.forward(x, snaps[20])["v"].double().numpy(), atol=1e-6)
    assert states["plane"].shape == (3, x.shape[0], 2)
    assert np.allclose(np.triu(states["advantage"][0], 1), 0)  # masked keys have no advantage
    with pytest.raises(ValueError, match=r"x: expected a float tensor of shape \(T, d_x\)"):
        widgets.snapshot_states(snaps, x[None], states["y"], states["is_signal"])


def test_snapshot_panel_and_slider_show_the_chosen_step():
    _, states, _ = _snapshot_states()
    axes = widgets.draw_snapshot_panel(plt.figure(), states, 1)
    assert len(axes) == 3 and "step 10" in axes[0].get_title()
    with pytest.raises(ValueError, match="index"):
        widgets.draw_snapshot_panel(plt.figure(), states, 3)
    slider = widgets.snapshot_slider(states)
    assert slider.result == 0
    slider.children[0].value = 20
    assert slider.result == 2


def test_sticky_explorer_reuses_the_static_result_and_reports_divergence(monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    from bayesattn_lite import experiments
    from bayesattn_lite.train import TrainingDiverged

    small_result = experiments.EMvsSGDConfig.small(seeds=(3,), T=30, steps=20).run(progress=False)
    assert small_result.loss_sgd.shape == (1, 20)

    def no_training(*args, **kwargs):
        raise TrainingDiverged("step 3: the loss of 1 model(s) is nan/inf")
    monkeypatch.setattr(experiments.EMvsSGDConfig, "run", no_training)
    panel = widgets.sticky_explorer(initial=small_result)   # the defaults are served from the cache
    assert panel.result is small_result
    panel.children[2].value = 0.1                          # a new setting: this one "diverges"
    assert panel.result is None                            # a message, no figure of nan curves



def test_a_panel_says_in_plain_text_that_its_sliders_need_a_kernel():
    """The online book shows a panel's plain-text form in place of its sliders (_config.yml leaves the
    widget view out of the HTML): that text must say where the panel runs, and fit ipywidgets' 110
    characters."""
    panel = widgets.advantage_explorer()
    assert repr(panel) == widgets.KERNEL_ONLY and len(widgets.KERNEL_ONLY) <= 110  # ipywidgets 7 and 8 show repr
    if hasattr(panel, "_repr_mimebundle_"):  # ipywidgets 8 (7, Colab's, sends the same two from _ipython_display_)
        bundle = panel._repr_mimebundle_()
        assert bundle["text/plain"] == widgets.KERNEL_ONLY
        assert "application/vnd.jupyter.widget-view+json" in bundle  # Jupyter and Colab still get the sliders
    assert panel.result is not None  # still an ipywidgets.interactive: it ran once


@pytest.mark.parametrize("kwargs, name", [(dict(scores=[0.0, float("nan"), 1.0, 0.0, 0.0]), "scores"),
                                          (dict(u=[float("inf"), 0.0]), "u"), (dict(eta=float("inf")), "eta")])
def test_advantage_state_refuses_nan_and_inf(kwargs, name):
    """NaN in used to be NaN on every panel, without a word."""
    with pytest.raises(ValueError, match=f"{name}: expected"):
        widgets.advantage_state(**kwargs)


@pytest.mark.parametrize("kwargs, named", [({"figsize": "big"}, "figsize"), ({"device": "gpu"}, "device")])
def test_sticky_explorer_checks_its_settings_when_made_not_when_a_control_moves(kwargs, named):
    pytest.importorskip("ipywidgets")
    with pytest.raises(ValueError, match=f"^{named}: expected"):
        widgets.sticky_explorer(**kwargs)


def test_a_sequence_of_one_position_gets_its_panel():
    p = attention.init_params(4, 3, 3, 2)
    states = widgets.snapshot_states({0: p, 5: p}, torch.randn(1, 4), torch.zeros(1, dtype=torch.long),
                                     torch.ones(1, dtype=torch.bool))
    assert states["plane"].shape == (2, 1, 2) and not states["plane"].any()
    widgets.draw_snapshot_panel(plt.figure(), states, 1)
    plt.close("all")


@pytest.mark.parametrize("make", [lambda f: widgets.advantage_explorer(figsize=f),
                                  lambda f: widgets.specialisation_explorer(figsize=f)])
def test_a_panels_figure_size_is_checked_when_it_is_made_not_inside_it(make):
    for bad in ("big", (0, -1)):
        with pytest.raises(ValueError, match=r"^figsize"):
            make(bad)
