"""bayesattn_lite.diagnostics: each measurement against a hand computation or autograd."""

import math

import numpy as np
import pytest
import torch

from bayesattn_lite import attention, diagnostics


def small_head(seed=0, T=5):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, T, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (3, T), generator=gen)
    params = attention.init_params(4, 3, 3, 3, std=0.8, seed=seed, dtype=torch.float64)
    return x, y, params


def scores_to_loss(s, x, y, params):
    """The head's loss as a function of its (causally masked) scores, for autograd."""
    s = s.masked_fill(~attention.causal_mask(x.shape[-2]), float("-inf"))
    alpha = torch.softmax(s, -1)
    v = x @ params["W_V"].T
    logits = alpha @ v @ params["W_O"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, 3), y.reshape(-1))


def test_attention_entropy_of_uniform_and_one_hot_rows():
    alpha = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    assert torch.allclose(diagnostics.attention_entropy(alpha), torch.tensor([0.0, math.log(2), math.log(3)]))


def test_attention_mass_of_complementary_sets_sums_to_one():
    x, _, params = small_head()
    alpha = attention.forward(x, params)["alpha"]
    mask = torch.rand(3, 5, generator=torch.Generator().manual_seed(1)) < 0.5
    total = diagnostics.attention_mass(alpha, mask) + diagnostics.attention_mass(alpha, ~mask)
    assert torch.allclose(total, torch.ones_like(total))


def test_advantage_flow_is_minus_the_gradient_of_a_common_score_shift():
    x, y, params = small_head()
    mask = torch.tensor([[True, False, True, False, False]] * 3)
    s = attention.forward(x, params)["s"].masked_fill(~attention.causal_mask(5), 0.0)
    c = torch.zeros((), dtype=torch.float64, requires_grad=True)
    scores_to_loss(s + c * mask[:, None, :], x, y, params).backward()
    g = diagnostics.compatibility_and_advantage(x, y, params)
    alpha = attention.forward(x, params)["alpha"]
    flow = diagnostics.advantage_flow(alpha, g["advantage"], mask).sum()
    assert torch.allclose(flow, -c.grad)


def test_predicted_attention_change_is_the_first_order_change_of_a_score_step():
    x, y, params = small_head()
    fw = attention.forward(x, params)
    g = diagnostics.compatibility_and_advantage(x, y, params)
    eps = 1e-6
    moved = torch.softmax(fw["s"] + eps * fw["alpha"] * g["advantage"], -1)
    predicted = diagnostics.predicted_attention_change(fw["alpha"], g["advantage"], eta=eps)
    assert torch.allclose(moved - fw["alpha"], predicted, atol=1e-15)
    assert torch.allclose(predicted.sum(-1), torch.zeros(3, 5, dtype=torch.float64), atol=1e-18)


def test_value_pull_is_minus_the_value_gradient():
    x, y, params = small_head()
    fw = attention.forward(x, params)
    v = fw["v"].clone().requires_grad_(True)
    logits = fw["alpha"] @ v @ params["W_O"].T
    torch.nn.functional.cross_entropy(logits.reshape(-1, 3), y.reshape(-1)).backward()
    u = diagnostics.compatibility_and_advantage(x, y, params)["u"]
    assert torch.allclose(diagnostics.value_pull(fw["alpha"], u), -v.grad)


def test_movement_toward_and_attended_compatibility_by_hand():
    u = torch.tensor([[[1.0, 0.0], [0.0, 2.0]]])          # two queries
    dv = torch.tensor([[[-3.0, 0.0], [0.0, -1.0]]])        # two values
    moved = diagnostics.movement_toward(dv, u)
    assert torch.allclose(moved, torch.tensor([[[3.0, 0.0], [0.0, 1.0]]]))
    alpha = torch.tensor([[[1.0, 0.0], [0.25, 0.75]]])
    v = torch.tensor([[[-2.0, 0.0], [1.0, 1.0]]])
    # query 0 uses v_0 = -u_0 direction: cos -1; query 1: 0.25 * cos(u_1, v_0) + 0.75 * cos(u_1, v_1)
    expected = torch.tensor([[-1.0, 0.25 * 0.0 + 0.75 / math.sqrt(2)]])
    assert torch.allclose(diagnostics.attended_compatibility(alpha, u, v), expected)


def test_relative_change():
    assert math.isclose(diagnostics.relative_change(torch.tensor([3.0, 4.0]), torch.tensor([3.0, 5.0])), 0.2)
    with pytest.raises(ValueError, match="nonzero"):
        diagnostics.relative_change(torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match=r"after: expected .* with \*S = \(2,\) \(as in before\)"):
        diagnostics.relative_change(torch.ones(2), torch.ones(3))


def test_settling_step_and_progress_step():
    steps = np.array([0, 10, 20, 30, 40])
    assert diagnostics.settling_step(steps, [0.5, 0.005, 0.02, 0.004, 0.001], 0.01) == 30
    assert diagnostics.settling_step(steps, [0.001] * 5, 0.01) == 0
    assert diagnostics.settling_step(steps, [0.5, 0.005, 0.02, 0.004, 0.1], 0.01) is None
    assert diagnostics.settling_step(steps, [np.nan, 0.005, 0.002, 0.004, 0.001], 0.01) == 10
    assert diagnostics.progress_step(steps, [1.0, 0.5, 0.2, 0.1, 0.0], 0.9) == 30
    assert diagnostics.progress_step(steps, [0.0, 2.0, 4.0, 4.0, 4.0], 0.5) == 10
    with pytest.raises(ValueError, match="fraction"):
        diagnostics.progress_step(steps, [1, 2, 3, 4, 5], 1.5)


def test_pca_of_points_on_a_line_and_a_plane():
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(200, 1, generator=gen, dtype=torch.float64)
    line = t @ torch.tensor([[1.0, 2.0, -1.0]], dtype=torch.float64) + 5.0
    out = diagnostics.pca(line, 1)
    assert out["explained"][0] > 1 - 1e-12 and math.isclose(out["explained"].sum(), 1.0)
    assert np.allclose(np.abs(out["components"][0]), np.array([1, 2, 1]) / math.sqrt(6))
    plane = torch.randn(300, 2, generator=gen, dtype=torch.float64) @ torch.randn(2, 5, generator=gen, dtype=torch.float64)
    out = diagnostics.pca(plane + 0.01 * torch.randn(300, 5, generator=gen, dtype=torch.float64), 2)
    assert out["explained"][:2].sum() > 0.999 and out["projected"].shape == (300, 2)
    with pytest.raises(ValueError, match="n_components"):
        diagnostics.pca(plane, 6)


def test_pearson_and_spearman():
    a = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert math.isclose(diagnostics.pearson(a, 2 * a + 1), 1.0)
    assert math.isclose(diagnostics.pearson(a, a[::-1]), -1.0)
    assert math.isclose(diagnostics.spearman(a, np.exp(a)), 1.0)
    b = np.array([3.0, 1.0, 2.0, 2.0, 9.0])
    assert math.isclose(diagnostics.pearson(a, b), np.corrcoef(a, b)[0, 1])
    ranks_b = np.array([4.0, 1.0, 2.5, 2.5, 5.0])  # ties share their mean rank
    assert math.isclose(diagnostics.spearman(a, b), np.corrcoef(a, ranks_b)[0, 1])
    assert math.isnan(diagnostics.pearson(a, np.ones(5)))
    with pytest.raises(ValueError, match="same size"):
        diagnostics.pearson(a, a[:3])


def test_bad_attention_maps_raise_value_errors():
    with pytest.raises(ValueError, match="sum to 1"):
        diagnostics.attention_entropy(torch.full((3, 3), 0.5))
    with pytest.raises(ValueError, match=r"alpha: expected a float tensor or array of shape \(\*B, T, T\)"):
        diagnostics.attention_entropy(torch.full((3, 2), 0.5))
    with pytest.raises(ValueError, match="key_mask"):
        diagnostics.attention_mass(torch.eye(3), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"alpha: expected a float tensor or array .*, got \[\[1.0\]\]"):
        diagnostics.attention_entropy([[1.0]])


def test_attention_received_is_one_for_uniform_attention_and_tracks_favoured_keys():
    T = 4
    uniform = attention.causal_mask(T).double()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    assert torch.allclose(diagnostics.attention_received(uniform), torch.ones(T, dtype=torch.float64))
    assert torch.allclose(diagnostics.attention_received(torch.full((T, T), 1 / T)), torch.ones(T))
    # every query attends only to key 0: key 0 gets n_i from each query i (1, 2, 3, 4 -> mean 2.5)
    first = torch.zeros(T, T)
    first[:, 0] = 1.0
    assert torch.allclose(diagnostics.attention_received(first), torch.tensor([2.5, 0.0, 0.0, 0.0]))


def test_change_vs_final_measures_moves_against_the_final_size():
    from bayesattn_lite.diagnostics import change_vs_final
    w = torch.ones(3, 4)
    rates = change_vs_final(torch.stack([0.0 * w, 0.5 * w, w]))
    np.testing.assert_allclose(rates, [0.5, 0.5])   # relative_change would call the first move infinite
    with pytest.raises(ValueError, match="nonzero last snapshot"):
        change_vs_final(torch.zeros(2, 3))


# ----------------------------------------------------------------------------- the settle measure

def test_settle_finds_the_peak_and_the_fall_below_a_share_of_it():
    steps = np.arange(10, 1010, 10)
    rates = np.exp(-(((steps - 200) / 150.0) ** 2)) + 0.01
    out = diagnostics.settle(steps, rates)
    assert out["peak_step"] == 200
    assert 350 <= out["settled"][0.2] < out["settled"][0.1] < 600
    assert "settles at step" in diagnostics.settle_text(out)


def test_settle_is_scale_free():
    steps = np.arange(10, 1010, 10)
    rates = np.exp(-(((steps - 200) / 150.0) ** 2)) + 0.01
    assert diagnostics.settle(steps, rates)["settled"] == diagnostics.settle(steps, 1e-4 * rates)["settled"]


def test_a_rising_or_flat_rate_is_not_settled_whatever_the_run_length():
    steps = np.arange(10, 1010, 10)
    for rates in (steps / 1000.0, np.ones(len(steps)), 0.5 + 0.4 * np.sin(steps / 50.0) ** 2):
        out = diagnostics.settle(steps, rates)
        assert out["settled"][0.2] is None
        assert diagnostics.settle_text(out).startswith("not settled by step 1000")


def test_a_dip_at_the_end_of_the_run_is_not_settling():
    steps = np.arange(10, 1010, 10)
    rates = np.exp(-(((steps - 200) / 150.0) ** 2)) + 0.3      # falls to a floor at 30% of its peak
    rates[-8:] = 0.01                                          # and dips in the last 8% of the run
    assert diagnostics.settle(steps, rates, min_span=0.0)["settled"][0.2] > 900    # the old rule: "settled"
    out = diagnostics.settle(steps, rates)                     # a settled state must last 20% of the run
    assert out["settled"][0.2] is None and out["latest"] == pytest.approx(802.0)
    rates[-30:] = 0.01                                         # a fall that lasts the last 30% counts
    assert 680 <= diagnostics.settle(steps, rates)["settled"][0.2] <= 720


def test_drift_ratio_tells_drift_from_noise():
    rng = np.random.default_rng(0)
    path = np.cumsum(np.ones(400))                             # a steady drift: 1 per update
    walk = np.cumsum(rng.standard_normal(400))                 # a random walk
    floor = rng.standard_normal(400)                           # noise around a fixed point

    def ratios(x, n=10, k=4):
        short = np.abs(np.diff(x[::n]))
        long = np.abs(np.diff(x[:: n * k]))
        return diagnostics.drift_ratio(short[: k * len(long)], long, k)

    assert ratios(path) == pytest.approx(1.0)
    assert 0.3 < np.mean(ratios(walk)) < 0.8                   # about 1/sqrt(4) = 0.5 (in 1-D, |.| is rough)
    assert np.mean(ratios(floor)) < 0.35                       # about 1/4
    with pytest.raises(ValueError, match="short, long"):
        diagnostics.drift_ratio(np.ones(7), np.ones(2), 4)
    with pytest.raises(ValueError, match="k"):
        diagnostics.drift_ratio(np.ones(4), np.ones(4), 1)


def test_settle_refuses_bad_rates():
    steps = np.arange(3)
    with pytest.raises(ValueError, match="rates"):
        diagnostics.settle(steps, [1.0, float("nan"), 0.5])
    with pytest.raises(ValueError, match="rates"):
        diagnostics.settle(steps, [1.0, -1.0, 0.5])
    with pytest.raises(ValueError, match="fractions"):
        diagnostics.settle(steps, [1.0, 0.5, 0.1], fractions=(1.5,))
    with pytest.raises(ValueError, match="min_span"):
        diagnostics.settle(steps, [1.0, 0.5, 0.1], min_span=1.0)


def test_frame_change_is_the_mean_total_variation_between_rows():
    uniform = torch.full((3, 4), 0.25)
    onehot = torch.tensor([[1.0, 0, 0, 0]] * 3)
    assert diagnostics.frame_change(uniform, onehot) == pytest.approx(0.75)
    assert diagnostics.frame_change(onehot, onehot) == 0.0
    # check=False (maps a softmax has just made) gives the same number, without the row checks
    assert diagnostics.frame_change(uniform, onehot, check=False) == pytest.approx(0.75)
    assert diagnostics.frame_change(uniform * 2, onehot, check=False) == pytest.approx(1.0)   # unchecked rows


def test_settle_order_names_what_settled_first_and_what_did_not():
    steps = np.arange(10, 1010, 10)
    early = diagnostics.settle(steps, np.exp(-(((steps - 200) / 150.0) ** 2)) + 0.01)
    late = diagnostics.settle(steps, np.exp(-(((steps - 400) / 150.0) ** 2)) + 0.01)
    rising = diagnostics.settle(steps, steps / 1000.0)
    assert diagnostics.settle_order(early, late) == "frame first"
    assert diagnostics.settle_order(late, early) == "values first"
    assert diagnostics.settle_order(early, early) == "together"
    assert diagnostics.settle_order(early, rising) == "frame first (values not settled by step 1000)"
    assert diagnostics.settle_order(rising, rising) == "neither settled by step 1000"


# ----------------------------------------------------------------------------- the size ladder's measures

def test_entropy_bias_is_signed_and_bounded_by_the_error():
    from bayesattn_lite import wind_tunnels
    task = wind_tunnels.wind_tunnel("bijection")
    batch = task.sample(32, seed=0)
    exact = torch.log(batch.posterior.clamp_min(1e-12))
    assert abs(diagnostics.entropy_bias_bits(exact, batch).item()) < 1e-6
    flat = torch.zeros_like(exact)            # uniform: never more confident than Bayes
    bias = diagnostics.entropy_bias_bits(flat, batch).item()
    assert bias > 0 and bias == pytest.approx(diagnostics.entropy_error_bits(flat, batch).item())
    sharp = 50 * exact                         # more confident than Bayes
    assert diagnostics.entropy_bias_bits(sharp, batch).item() < 0


def test_orthogonality_floor_is_computed_not_a_false_bound():
    assert diagnostics.orthogonality_floor(4, 6) < 1e-3                  # fits: orthogonal
    three = diagnostics.orthogonality_floor(3, 2, centred=True)         # the counter-example
    assert 1 / 3 - 1e-3 < three < 1 / 2 - 0.1                            # below the false bound 1/(n-1)
    assert diagnostics.orthogonality_floor(16, 12) > 0.02                # 16 cannot be orthogonal in 12
    random_keys = torch.randn(16, 12, generator=torch.Generator().manual_seed(0))
    assert diagnostics.key_orthogonality(random_keys) > diagnostics.orthogonality_floor(16, 12)


def test_mean_sd_is_the_sample_sd_over_seeds():
    m, s = diagnostics.mean_sd([1.0, 2.0, 3.0, 6.0])
    assert m == 3.0 and s == pytest.approx(np.std([1, 2, 3, 6], ddof=1)) and s == pytest.approx(math.sqrt(14 / 3))
    assert diagnostics.mean_sd(torch.tensor([2.0, 4.0])) == (3.0, pytest.approx(math.sqrt(2)))
    m1, s1 = diagnostics.mean_sd([0.25])
    assert m1 == 0.25 and math.isnan(s1)  # one seed: no spread to estimate
    for bad in ([], [1.0, float("nan")], ["a"]):
        with pytest.raises(ValueError, match="values"):
            diagnostics.mean_sd(bad)


def test_within_position_spearman_holds_the_position_fixed():
    rng = np.random.default_rng(0)
    positions = np.repeat(np.arange(5), 40).astype(float)
    # entropy a function of the position (the bijection): PC1 = position gives rho(PC1, H) = 1 ...
    h_by_position = np.log2(6 - positions)
    assert diagnostics.spearman(-positions, h_by_position) == pytest.approx(1.0)
    # ... and nothing within a position: every position is left out, so nan
    assert math.isnan(diagnostics.within_position_spearman(-positions, h_by_position, positions))
    # entropy varying within each position, tracked by PC1 in one position order, against it in another
    h = rng.random(200) + positions
    pc1 = np.where(positions % 2 == 0, h, -h) + 1e-3 * rng.standard_normal(200)
    assert diagnostics.within_position_spearman(pc1, h, positions) == pytest.approx(1.0, abs=1e-3)
    assert diagnostics.within_position_spearman(rng.standard_normal(200), h, positions) < 0.2  # no ordering
    # (n, d) points: their PC1 is taken over all the points, as value_manifold does
    points = np.stack([pc1 * 10, rng.standard_normal(200)], 1)
    assert diagnostics.within_position_spearman(points, h, positions) == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError, match="positions.*expected"):
        diagnostics.within_position_spearman(pc1, h, positions[:-1])


_ALPHA = torch.softmax(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)), -1)
_RATES = diagnostics.settle(np.arange(10), np.linspace(1, 0, 10))


@pytest.mark.parametrize("call, name", [
    (lambda: diagnostics.entropy(torch.tensor([0.5, 0.5]), bits="yes"), "bits"),
    (lambda: diagnostics.kl_divergence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 2.0])), "log_q"),
    (lambda: diagnostics.kl_divergence(torch.tensor([0.5, 0.5]), torch.log(torch.tensor([0.5, 0.5])), bits=1), "bits"),
    (lambda: diagnostics.attention_mass(_ALPHA, torch.tensor([1.0, 0.0, 1.0, 0.5])), "key_mask"),
    (lambda: diagnostics.advantage_flow(_ALPHA, torch.full((4, 4), math.nan), torch.ones(4, dtype=torch.bool)),
     "advantage"),
    (lambda: diagnostics.predicted_attention_change(_ALPHA, torch.randn(4, 4), eta=-1), "eta"),
    (lambda: diagnostics.predicted_attention_change(_ALPHA, torch.full((4, 4), math.inf)), "advantage"),
    (lambda: diagnostics.movement_toward(torch.randn(4, 2), torch.full((4, 2), math.nan)), "u"),
    (lambda: diagnostics.movement_toward(torch.full((4, 2), math.nan), torch.randn(4, 2)), "delta_v"),
    (lambda: diagnostics.frame_change(_ALPHA, torch.rand(4, 4) + 1), "after"),
    (lambda: diagnostics.frame_change(torch.full((4, 4), math.nan), _ALPHA), "before"),
    (lambda: diagnostics.settle_order(_RATES, _RATES, fraction=0.33), "fraction"),
    (lambda: diagnostics.settle_order("frame", _RATES), "frame"),
    (lambda: diagnostics.settle_order(_RATES, {"settled": [0.2]}), "values"),
    (lambda: diagnostics.settle_text("result"), "result"),
    (lambda: diagnostics.group_means(torch.randn(4, 3), torch.tensor([0.0, 1.0, 0.0, 1.0])), "labels"),
    (lambda: diagnostics.value_manifold(torch.randn(5, 3), torch.full((5,), math.nan)), "entropy"),
    (lambda: diagnostics.value_manifold(torch.full((5, 3), math.nan), torch.randn(5)), "points"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"{name}.*expected"):
        call()


def test_valid_edge_inputs_are_accepted():
    assert diagnostics.attention_mass(_ALPHA, torch.tensor([1.0, 0.0, 1.0, 0.0])).shape == (4,)  # 0/1 floats
    q = torch.softmax(torch.randn(3, 5), -1)  # float32: normalised only up to rounding
    assert diagnostics.kl_divergence(q, torch.log(q)).abs().max() < 1e-6
    p = torch.zeros(2, 3)  # an all-zero row of p: no distribution there, so log_q is not checked
    assert diagnostics.kl_divergence(p, torch.zeros(2, 3)).abs().max() == 0
    assert diagnostics.frame_change(_ALPHA, _ALPHA) == 0.0
    assert diagnostics.settle_text(_RATES).startswith(("settles", "not settled"))
    assert diagnostics.settle_order({"settled": {0.2: 100}}, {"settled": {0.2: None}}) == "frame first (values not settled)"
    assert math.isnan(diagnostics.pearson([1, 1, 1], [1, 2, 3]))  # documented: nan for a constant sample


def test_bought_in_window_sums_the_intervals_from_its_start_and_the_realised_drop():
    attribution = {"values": np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]), "routing": np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])}
    loss = np.array([[10.0, 8.0, 5.0, 1.0], [4.0, 3.0, 2.0, 2.0]])
    out = diagnostics.bought_in_window(attribution, loss, 1)
    np.testing.assert_array_equal(out["values"], [5.0, 1.0])
    np.testing.assert_array_equal(out["routing"], [2.0, 0.0])
    np.testing.assert_array_equal(out["realised"], [7.0, 1.0])  # loss at snapshot 1 minus the last
    whole = diagnostics.bought_in_window({"g": [1.0, 2.0]}, [3.0, 2.0, 0.0], 0)
    assert whole["g"] == 3.0 and whole["realised"] == 3.0


def test_change_vs_final_refuses_nan():
    s = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    s[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"snapshots: expected finite values, got 1 NaN/inf entries"):
        diagnostics.change_vs_final(s)


def test_error_signals_and_values_with_nan_are_refused():
    alpha = torch.softmax(torch.randn(5, 5), -1)
    u, v = torch.randn(5, 3), torch.randn(5, 3)
    with pytest.raises(ValueError, match="^u: expected finite"):
        diagnostics.attended_compatibility(alpha, u * float("nan"), v)
    with pytest.raises(ValueError, match="^u: expected finite"):
        diagnostics.value_pull(alpha, u * float("nan"))


def test_settle_needs_at_least_one_fraction():
    with pytest.raises(ValueError, match="^fractions: expected"):
        diagnostics.settle(np.arange(10), np.linspace(1, 0, 10), fractions=())


def test_probabilities_passed_as_logits_are_refused():
    from bayesattn_lite import wind_tunnels
    batch = wind_tunnels.wind_tunnel("bijection").sample(4, seed=0)
    logits = torch.randn(batch.posterior.shape)
    with pytest.raises(ValueError, match="^logits: expected the model's logits"):
        diagnostics.kl_bits(torch.softmax(logits, -1), batch)
    assert torch.isclose(diagnostics.kl_bits(torch.log_softmax(logits, -1), batch), diagnostics.kl_bits(logits, batch))


def test_orthogonality_floor_refuses_a_centred_flag_that_is_not_a_bool():
    with pytest.raises(ValueError, match=r"^centred: expected True or False, got 'no'"):
        diagnostics.orthogonality_floor(3, 2, centred="no", starts=1, steps=2)


def test_settle_refuses_a_window_longer_than_the_rates():
    with pytest.raises(ValueError, match=r"window: expected at most the number of rates \(10\), or 1 for no "
                                         r"smoothing, got 50"):
        diagnostics.settle(np.arange(10), np.linspace(1, 0, 10), window=50)
    short = diagnostics.settle(np.arange(3), [1.0, 0.5, 0.1])   # the default window: a short run is left unsmoothed
    assert short["peak_step"] == 0
