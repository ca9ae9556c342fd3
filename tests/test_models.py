"""The four architectures of bayesattn_lite.models: shapes, causality, the selective scan against
its recurrence, the attention probes and ``run_with_probes``, the registry and its sizes, bad inputs."""

import inspect

import pytest
import torch

from bayesattn_lite import models
from bayesattn_lite.models import (ARCHITECTURES, REGISTRY, CausalSelfAttention, SelectiveSSM, Transformer,
                                   build, count_parameters, selective_scan, sequential_scan, sizes)

V, C = 10, 6


def tokens(B=3, T=12, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_shapes_and_finite(name):
    torch.manual_seed(0)
    out = build(name, V, C)(tokens())
    assert out.shape == (3, 12, C) and out.dtype == torch.float32
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_causal_future_tokens_do_not_change_past_logits(name):
    torch.manual_seed(0)
    model = build(name, V, C).eval()
    x = tokens(T=17)  # 17: not a power of two, so the scan's last round is partial
    base = model(x)
    for t in (0, 5, 15):
        y = x.clone()
        y[:, t + 1] = (y[:, t + 1] + 3) % V
        changed = model(y)
        torch.testing.assert_close(changed[:, :t + 1], base[:, :t + 1], rtol=0, atol=1e-6)
        assert (changed[:, t + 1] - base[:, t + 1]).abs().max() > 1e-6  # and the future does change


@pytest.mark.parametrize("T", [1, 2, 3, 7, 8, 33])
def test_parallel_scan_matches_the_recurrence(T):
    gen = torch.Generator().manual_seed(T)
    a = torch.rand(2, T, 5, 4, generator=gen, dtype=torch.float64)
    b = torch.randn(2, T, 5, 4, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(selective_scan(a, b), sequential_scan(a, b), rtol=1e-12, atol=1e-12)


def test_scan_gradients_match_the_recurrence():
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(2, 11, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 11, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 11, 3, generator=gen, dtype=torch.float64)
    ga = torch.autograd.grad((selective_scan(a, b) * w).sum(), (a, b))
    gs = torch.autograd.grad((sequential_scan(a, b) * w).sum(), (a, b))
    for x, y in zip(ga, gs):
        torch.testing.assert_close(x, y)


def test_mamba_model_with_the_parallel_scan_equals_the_sequential_one():
    torch.manual_seed(0)
    model = SelectiveSSM(V, C, d_model=16, n_layers=2, d_state=4)
    x = tokens(T=19)
    torch.testing.assert_close(model(x), model(x, scan=sequential_scan), rtol=1e-5, atol=1e-5)


def test_mamba_gates_depend_on_the_input():
    """Delta, B, C are functions of the token: the same layer gives different decays per input."""
    torch.manual_seed(0)
    layer = SelectiveSSM(V, C, d_model=16, n_layers=1, d_state=4).blocks[0].mixer
    a, b, Cr, _, _ = layer.ssm_inputs(torch.randn(1, 6, 16))
    assert a.shape == b.shape == (1, 6, 32, 4) and Cr.shape == (1, 6, 4)
    assert (a > 0).all() and (a <= 1).all()  # A < 0 and Delta > 0: every step decays
    assert a.std(dim=1).mean() > 1e-4        # and the decay changes along the sequence


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_runs_on_cuda_and_agrees_with_cpu(name):
    torch.manual_seed(0)
    model = build(name, V, C)
    x = tokens()
    torch.testing.assert_close(model.cuda()(x.cuda()).cpu(), model.cpu()(x), rtol=1e-3, atol=1e-3)


def test_probes_give_q_k_v_alpha_g_and_u():
    torch.manual_seed(0)
    model = Transformer(V, C, d_model=16, n_layers=2, n_heads=4)
    layers = model.attention_layers()
    assert len(layers) == 2 and all(isinstance(layer, CausalSelfAttention) for layer in layers)
    seen, grads = {}, {}
    for i, layer in enumerate(layers):
        for probe in ("probe_q", "probe_k", "probe_v", "probe_alpha", "probe_g"):
            getattr(layer, probe).register_forward_hook(
                lambda mod, inp, out, key=(i, probe): seen.__setitem__(key, out.detach()))
        layer.probe_g.register_full_backward_hook(
            lambda mod, gin, gout, i=i: grads.__setitem__(i, gout[0].detach()))
    x = tokens(B=2, T=9)
    model(x).sum().backward()
    for i in range(2):
        for probe in ("probe_q", "probe_k", "probe_v", "probe_g"):
            assert seen[i, probe].shape == (2, 4, 9, 4)
        alpha = seen[i, "probe_alpha"]
        assert alpha.shape == (2, 4, 9, 9)
        torch.testing.assert_close(alpha.sum(-1), torch.ones(2, 4, 9))
        assert (alpha.triu(1) == 0).all()  # causal: no weight on the future
        torch.testing.assert_close(seen[i, "probe_g"], alpha @ seen[i, "probe_v"])
        assert grads[i].shape == (2, 4, 9, 4) and grads[i].abs().sum() > 0


def test_run_with_probes_reads_every_layer_in_order():
    torch.manual_seed(0)
    model = Transformer(V, C, d_model=16, n_layers=2, n_heads=4)
    x = tokens(B=2, T=9)
    records = models.run_with_probes(model, x)
    assert len(records) == 2 and all(set(r) == {"q", "k", "v", "alpha", "g"} for r in records)
    for r in records:
        assert r["k"].shape == (2, 4, 9, 4) and not r["k"].requires_grad
        torch.testing.assert_close(r["g"], r["alpha"] @ r["v"])
    only = models.run_with_probes(model, x, ("probe_alpha",))
    assert [set(r) for r in only] == [{"alpha"}, {"alpha"}]
    torch.testing.assert_close(only[1]["alpha"], records[1]["alpha"])
    layer = model.attention_layers()[0]  # a bare layer is its own model
    [alone] = models.run_with_probes(layer, torch.randn(1, 5, 16), ("probe_alpha",))
    assert alone["alpha"].shape == (1, 4, 5, 5)
    assert [m for m in model.modules() if models.has_probes(m)] == model.attention_layers()
    assert not any(models.has_probes(m) for m in build("mamba", V, C).modules())
    assert all(h == {} for h in (layer.probe_alpha._forward_hooks, layer.probe_k._forward_hooks))  # removed
    with pytest.raises(ValueError, match="names"):
        models.run_with_probes(model, x, ("probe_x",))
    with pytest.raises(ValueError, match="probe points"):
        models.run_with_probes(build("lstm", V, C), x)


def test_the_registry_is_the_one_table_of_architectures():
    assert ARCHITECTURES == tuple(REGISTRY) == ("transformer", "mamba", "lstm", "mlp")
    for name, arch in REGISTRY.items():
        assert arch.name == name and type(build(name, V, C)) is arch.cls
        assert sizes(name) == arch.small and sizes(name, "paper") == {**arch.small, **arch.paper}
        accepted = inspect.signature(arch.cls).parameters
        assert set(arch.small) <= set(accepted) and set(arch.paper) <= set(accepted), name
        assert arch.cost > 0 and arch.gpu_step_seconds > 0 and arch.colour.startswith("#")
    assert len({a.colour for a in REGISTRY.values()}) == len(REGISTRY)  # told apart in every figure


def test_parameter_counts_are_matched_within_the_stated_factor():
    for vocab, classes in ((8, 8), (10, 5), (20, 20)):
        counts = [count_parameters(build(name, vocab, classes)) for name in ARCHITECTURES]
        assert max(counts) / min(counts) <= models.PARAM_MATCH_FACTOR, counts


def test_paper_sizes_are_in_paper_I_range():
    for name in ARCHITECTURES:
        n = count_parameters(build(name, 20, 20, **REGISTRY[name].paper))
        assert 2.5e6 <= n <= 7.5e6, (name, n)  # Paper I: 2.7M-7.4M parameters


def test_sizes_are_copies_and_override():
    mine = sizes("transformer")
    mine["d_model"] = 999
    assert sizes("transformer")["d_model"] != 999 and REGISTRY["transformer"].small["d_model"] != 999
    assert build("lstm", V, C, d_model=8).d_model == 8


@pytest.mark.parametrize("call, match", [
    (lambda: build("gru", V, C), "one of"),
    (lambda: sizes("rnn", "paper"), "one of"),
    (lambda: build("transformer", V, C, d_model=30, n_heads=4), "divisor"),
    (lambda: build("mlp", V, C, window=0), "window"),
    (lambda: build("lstm", 1, C), "vocab_size"),
    (lambda: build("mamba", V, C, d_state=2.5), "d_state"),
])
def test_bad_sizes_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_bad_tokens_raise(name):
    model = build(name, V, C)
    with pytest.raises(ValueError, match=r"values in \[0, 10\)"):
        model(torch.full((2, 4), V))
    with pytest.raises(ValueError, match="shape"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"int64 \(torch.long\) or int32 tensor of shape \(B, T\), got .*float32"):
        model(torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"int64 \(torch.long\) or int32 tensor of shape \(B, T\), got \[\[1, 2\]\]"):
        model([[1, 2]])
    with pytest.raises(ValueError, match="uint8"):   # nn.Embedding looks up int64 and int32 only
        model(torch.zeros(2, 4, dtype=torch.uint8))
    assert model(torch.zeros(2, 4, dtype=torch.int32)).shape == (2, 4, C)


def test_too_long_for_position_embeddings_raises():
    with pytest.raises(ValueError, match="max_len=8"):
        build("transformer", V, C, max_len=8)(torch.zeros(1, 9, dtype=torch.long))


def test_scan_shape_mismatch_raises():
    with pytest.raises(ValueError, match=r"b: expected .*\(as in a\)"):
        selective_scan(torch.ones(2, 3, 4), torch.ones(2, 3, 5))


def test_mamba_mixing_weights_unroll_the_recurrence():
    torch.manual_seed(0)
    layer = SelectiveSSM(V, C, d_model=8, n_layers=1, d_state=3).blocks[0].mixer.double()
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    a, b, Cr, u, _ = layer.ssm_inputs(x)
    y = (sequential_scan(a, b) @ Cr.unsqueeze(-1)).squeeze(-1)              # C_t . h_t, (B, T, D)
    omega = layer.mixing_weights(x)
    assert omega.shape == (2, 16, 7, 7) and (omega.triu(1) == 0).all()
    torch.testing.assert_close(torch.einsum("bdts,bsd->btd", omega, u), y)


def test_one_size_rule_keeps_the_paper_sizes_under_any_override():
    transformer = REGISTRY["transformer"]
    assert sizes("transformer", "paper", n_layers=1) == {**transformer.small, **transformer.paper, "n_layers": 1}
    assert sizes("lstm") == REGISTRY["lstm"].small
    with pytest.raises(ValueError, match=r"scale: expected one of \['small', 'paper'\]"):
        sizes("mlp", "gpu")


def test_compare_at_paper_size_with_an_override_builds_the_paper_model():
    """The regression: model_sizes={"transformer": {"n_layers": 1}} once replaced the paper's sizes
    and trained an 11,804-parameter transformer instead of a d_model-256 one."""
    from bayesattn_lite import comparison
    rows, trained = comparison.compare(["transformer"], ["bijection"], [0], 0, size="paper", n_eval=2,
                                       model_sizes={"transformer": {"n_layers": 1}}, keep_models=True)
    model = trained["transformer", "bijection", 0]
    assert model.d_model == REGISTRY["transformer"].paper["d_model"] and len(model.blocks) == 1
    assert rows[0]["n_params"] > 700_000


# ----------------------------------------------------------------------------- stream positions

def stream_model(seed=0, stream_start=4):
    torch.manual_seed(seed)
    return Transformer(V, C, d_model=16, n_layers=2, n_heads=2, max_len=8, stream_start=stream_start)


def test_stream_positions_are_causal_and_run_past_max_len():
    model = stream_model().eval()
    x = tokens(T=20)                 # longer than max_len = 8: the stream has no length limit
    y = x.clone()
    y[:, 15:] = (y[:, 15:] + 1) % V
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (3, 20, C) and torch.isfinite(a).all()
    torch.testing.assert_close(a[:, :15], b[:, :15])
    assert not torch.allclose(a[:, 15:], b[:, 15:])


def test_stream_bias_is_alibi_inside_the_stream_and_zero_elsewhere():
    model = stream_model(stream_start=4)
    bias = model._stream_bias(7, "cpu")
    assert bias.shape == (2, 7, 7)
    assert (bias[:, :4] == 0).all() and (bias[:, :, :4] == 0).all()      # no bias to or from the prefix
    torch.testing.assert_close(bias[0, 6, 4], torch.tensor(-0.5 * 2))     # head 1: slope 1/2, distance 2
    torch.testing.assert_close(bias[1, 6, 5], torch.tensor(-0.25))        # head 2: slope 1/4, distance 1
    assert (bias[:, 4, 5:] == 0).all()                                     # the future is masked anyway


def test_stream_positions_share_one_embedding():
    """Positions from stream_start on read the same embedding row: a shifted stream token's
    first-layer input is the same wherever it sits in the stream."""
    model = stream_model()
    x = tokens(T=10)
    seen = []
    handle = model.blocks[0].ln1.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    with torch.no_grad():
        model(x)
    handle.remove()
    inputs = seen[0]
    expected = model.embed(x) + model.pos.weight[model.stream_start]
    torch.testing.assert_close(inputs[:, 4:], expected[:, 4:])


def test_stream_start_must_fit_the_position_table():
    with pytest.raises(ValueError, match="stream_start"):
        Transformer(V, C, d_model=16, n_heads=2, max_len=8, stream_start=8)


@pytest.mark.parametrize("make, named", [
    (lambda: models.CausalSelfAttention(24, 0), "n_heads"),
    (lambda: models.SelectiveSSMLayer(32, d_state=-1), "d_state"),
    (lambda: models.CausalSelfAttention(24, 2)(torch.randn(2, 5, 16)), "x"),
])
def test_layers_name_a_bad_size_or_input(make, named):
    with pytest.raises(ValueError, match=f"^{named}: expected"):
        make()


def test_run_with_probes_refuses_a_probe_name_given_twice():
    model = Transformer(vocab_size=5, n_classes=5, d_model=8, n_layers=1, n_heads=2, max_len=8)
    with pytest.raises(ValueError, match="names: expected distinct probe names.*'k' twice"):
        models.run_with_probes(model, torch.zeros(1, 4, dtype=torch.long), names=["k", "k"])


def test_a_bias_per_head_and_finite_inputs_to_the_mixing_weights():
    attn = CausalSelfAttention(16, n_heads=2)
    with pytest.raises(ValueError, match=r"bias: expected shape \(H=2, T=5, T=5\): one \(T, T\) bias per head, "
                                         r"got Tensor of shape \(3, 5, 5\)"):
        attn(torch.randn(2, 5, 16), bias=torch.zeros(3, 5, 5))
    assert attn(torch.randn(2, 5, 16), bias=torch.zeros(2, 5, 5)).shape == (2, 5, 16)
    with pytest.raises(ValueError, match="x: expected finite values, got 48 NaN/inf"):
        models.SelectiveSSMLayer(16, d_state=4).mixing_weights(torch.full((1, 3, 16), float("nan")))
