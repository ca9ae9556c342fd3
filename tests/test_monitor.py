"""The training monitor: what it records must be what the closed-form formulas (attention.gradients)
and autograd say, for nn.MultiheadAttention, for attention.AttentionHead and for modules with probe
points; and it must not change training or count evaluation passes."""

import importlib.util
import math

import pytest
import torch
from torch import nn

from bayesattn_lite import attention, models, monitor
from bayesattn_lite.monitor import Monitor

DT = torch.float64


class MHAModel(nn.Module):
    """A user's model: MultiheadAttention (causal) and a linear read-out, no residual."""

    def __init__(self, E=4, H=1, C=3, bias=False, batch_first=True):
        super().__init__()
        self.mha = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first)
        self.readout = nn.Linear(E, C, bias=False)
        self.batch_first = batch_first

    def forward(self, x):
        T = x.shape[1] if self.batch_first else x.shape[0]
        mask = ~torch.ones(T, T, dtype=torch.bool).tril()
        out, _ = self.mha(x, x, x, attn_mask=mask, need_weights=False)
        return self.readout(out)


class ProbeAttention(nn.Module):
    """A stand-in with the probe points of models.CausalSelfAttention (the contract of issue 6)."""

    def __init__(self, E=6, H=2):
        super().__init__()
        self.H = H
        self.qkv = nn.Linear(E, 3 * E)
        self.proj = nn.Linear(E, E)
        for name in models.PROBES:
            setattr(self, name, nn.Identity())

    def forward(self, x):
        B, T, E = x.shape
        q, k, v = (t.reshape(B, T, self.H, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        q, k, v = self.probe_q(q), self.probe_k(k), self.probe_v(v)
        s = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
        alpha = self.probe_alpha(torch.softmax(s, -1))
        g = self.probe_g(alpha @ v)
        self.g = g  # for the test only: the real module stores nothing
        g.retain_grad()
        return self.proj(g.transpose(1, 2).reshape(B, T, E))


class ProbeModel(nn.Module):
    def __init__(self, V=5, E=6, C=3):
        super().__init__()
        self.embed = nn.Embedding(V, E)
        self.layers = nn.ModuleList([ProbeAttention(E), ProbeAttention(E)])
        self.out = nn.Linear(E, C)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = h + layer(h)
        return self.out(h)


def _step(model, x, y, opt=None):
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad()
    return loss


def _data(B=3, T=6, E=4, C=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, E, generator=gen, dtype=DT), torch.randint(0, C, (B, T), generator=gen)


def test_mha_single_head_matches_the_closed_form():
    torch.manual_seed(0)
    model = MHAModel().to(DT)
    x, y = _data()
    with Monitor(model, every=1, keep=10) as mon:
        _step(model, x, y)
    rec = mon.last("mha")
    E = 4
    W = model.mha.in_proj_weight.detach()
    params = {"W_Q": W[:E], "W_K": W[E:2 * E], "W_V": W[2 * E:],
              "W_O": model.readout.weight.detach() @ model.mha.out_proj.weight.detach()}
    ref = attention.gradients(x, y, params)
    fw = attention.forward(x, params)
    assert torch.allclose(rec["alpha"][:, 0], fw["alpha"], atol=1e-12)
    assert torch.allclose(rec["v"][:, 0], fw["v"], atol=1e-12)
    for key in ("u", "b", "advantage"):
        assert torch.allclose(rec[key][:, 0], ref[key], atol=1e-12), key


@pytest.mark.parametrize("batch_first", [True, False])
def test_mha_several_heads_match_autograd(batch_first):
    torch.manual_seed(1)
    E, H = 6, 3
    model = MHAModel(E=E, H=H, bias=True, batch_first=batch_first).to(DT)
    x, y = _data(E=E)
    x_in = x if batch_first else x.transpose(0, 1)
    with Monitor(model, every=1, keep=10) as mon:
        logits = model(x_in)
        logits = logits if batch_first else logits.transpose(0, 1)
        nn.functional.cross_entropy(logits.reshape(-1, 3), y.reshape(-1)).backward()
    rec = mon.last()
    # reference: the same layer written out by hand, with g kept for autograd
    mha, T = model.mha, x.shape[1]
    q, k, v = (nn.functional.linear(x, W, b) for W, b in zip(mha.in_proj_weight.chunk(3), mha.in_proj_bias.chunk(3)))
    q, k, v = (t.reshape(3, T, H, -1).transpose(1, 2) for t in (q, k, v))
    s = (q @ k.transpose(-1, -2) / math.sqrt(E // H)).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    alpha = torch.softmax(s, -1)
    g = (alpha @ v).detach().requires_grad_()
    out = mha.out_proj(g.transpose(1, 2).reshape(3, T, E))
    nn.functional.cross_entropy(model.readout(out).reshape(-1, 3), y.reshape(-1)).backward()
    assert rec["alpha"].shape == (3, H, T, T)
    assert torch.allclose(rec["alpha"], alpha.detach(), atol=1e-12)
    assert torch.allclose(rec["u"], g.grad, atol=1e-12)
    assert torch.allclose(rec["b"], g.grad @ v.detach().transpose(-1, -2), atol=1e-12)


def test_mha_with_other_key_and_value_widths_gives_torchs_weights():
    """kdim, vdim != embed_dim: torch keeps three in-projections (no packed in_proj_weight)."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True)
    assert mha.in_proj_weight is None
    q, k, v = torch.randn(2, 6, 4), torch.randn(2, 7, 3), torch.randn(2, 7, 5)
    alpha, values = monitor._mha_internals(mha, (q, k, v), {})
    _, weights = mha(q, k, v, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(alpha, weights)
    assert values.shape == (2, 2, 7, 2)


def test_attention_head_matches_the_closed_form():
    head = attention.AttentionHead(5, 3, 4, 3, std=0.7, seed=2, dtype=DT)
    x, y = _data(E=5, seed=2)
    with Monitor(head, every=1, keep=10) as mon:
        _step(head, x, y)
    rec = mon.last()
    ref = attention.gradients(x, y, {k: p.detach() for k, p in head.params().items()})
    for key in ("u", "b", "advantage"):
        assert torch.allclose(rec[key][:, 0], ref[key], atol=1e-12), key
    ds = -rec["alpha"] * rec["advantage"]
    assert rec["score_grad"] == pytest.approx(ds.abs().sum(-1).mean().item(), abs=1e-12)


def test_probe_points_give_u_as_autograd_does():
    torch.manual_seed(3)
    model = ProbeModel().to(DT)
    tokens = torch.randint(0, 5, (2, 7))
    y = torch.randint(0, 3, (2, 7))
    with Monitor(model, every=1, keep=10) as mon:
        _step(model, tokens, y)
    assert [r["layer"] for r in mon.records] == ["layers.1", "layers.0"]  # backward order
    for i, layer in enumerate(model.layers):
        rec = mon.last(f"layers.{i}")
        assert rec["alpha"].shape == (2, 2, 7, 7)
        assert torch.allclose(rec["u"], layer.g.grad, atol=1e-12)


@pytest.mark.skipif(importlib.util.find_spec("bayesattn_lite.models") is None, reason="models.py not there yet")
def test_the_course_transformer_through_its_probes():
    from bayesattn_lite import models
    torch.manual_seed(0)
    model = models.Transformer(vocab_size=5, n_classes=3, d_model=16, n_layers=2, n_heads=2)
    layers = model.attention_layers()
    grads = {}

    def keep_grad(i):
        def hook(module, args, out):
            out.register_hook(lambda g: grads.__setitem__(i, g))
        return hook

    for i, layer in enumerate(layers):
        layer.probe_g.register_forward_hook(keep_grad(i))
    tokens, y = torch.randint(0, 5, (2, 6)), torch.randint(0, 3, (2, 6))
    with Monitor(model, every=1) as mon:
        _step(model, tokens, y)
    assert len(mon.records) == len(layers) == len(mon.layers)
    for i, (name, _, kind) in enumerate(mon.layers):
        assert kind == "probes"
        assert torch.allclose(mon.last(name)["u"], grads[i], atol=1e-6)


def test_steps_evaluation_passes_and_detach():
    torch.manual_seed(0)
    model = MHAModel().to(DT)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    mon = Monitor(model, every=3)
    for step in range(7):
        _step(model, x, y, opt)
        with torch.no_grad():
            model(x)  # an evaluation pass: not a step
    mon.detach()
    _step(model, x, y, opt)
    summary = mon.summary()["mha"]
    assert summary["step"].tolist() == [0, 3, 6]
    assert math.isnan(summary["frame_rate"][0]) and summary["frame_rate"][1] > 0
    assert all(0 <= m <= 1 for m in summary["positive_mass"])


def test_probe_batch_and_frozen_weights_give_zero_rates():
    model = MHAModel().to(DT)
    x, y = _data()
    probe, _ = _data(B=2, seed=9)
    with Monitor(model, steps=[1, 2], probe=probe) as mon:
        for _ in range(3):
            _step(model, x, y)  # no optimizer step: the weights do not move
    summary = mon.summary()["mha"]
    assert summary["step"].tolist() == [1, 2]
    assert summary["frame_rate"][1] == 0 and summary["precision_rate"][1] == 0
    assert mon.last()["alpha"].shape[0] == 3  # the kept tensors are the training batch's


def test_bad_inputs_raise_value_errors():
    with pytest.raises(ValueError, match="attention layer"):
        Monitor(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="every"):
        Monitor(MHAModel(), every=0)
    with pytest.raises(ValueError, match="torch.nn.Module"):
        monitor.attention_layers("not a model")


def test_measure_overhead_reports_both_variants():
    x, y = _data(E=4)
    x, y = x.float(), y

    def step_fn(model, opt, step):
        opt.zero_grad()
        _step(model, x, y)
        opt.step()

    out = monitor.measure_overhead(lambda: MHAModel(), step_fn, steps=6, every=2, repeats=1)
    assert out["without"] > 0 and out["with"] > 0 and out["ratio"] == out["with"] / out["without"]


def test_rates_are_the_course_frame_and_precision_rates():
    """frame_rate is diagnostics.frame_change (TV) between consecutive probe snapshots; precision_rate is
    diagnostics.change_vs_final of the stored value snapshots, relative to the latest one's size."""
    from bayesattn_lite import diagnostics
    torch.manual_seed(4)
    model = MHAModel(E=6, H=2, bias=True).to(DT)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    x, y = _data(E=6)
    probe, _ = _data(B=2, E=6, seed=9)
    with Monitor(model, every=2, probe=probe) as mon:
        for _ in range(7):
            _step(model, x, y, opt)
    summary = mon.summary()["mha"]
    records = [r for r in mon.records if r["layer"] == "mha"]
    assert summary["step"].tolist() == [0, 2, 4, 6]
    snaps = torch.stack([r["v_snapshot"] for r in records])
    assert snaps.shape[1] == 2  # the probe's sequences, not the training batch's
    assert math.isnan(summary["precision_rate"][0]) and math.isnan(summary["frame_rate"][0])
    assert summary["precision_rate"][1:] == pytest.approx(diagnostics.change_vs_final(snaps), rel=1e-12)
    assert all(0 < f <= 1 for f in summary["frame_rate"][1:])  # a TV distance


def test_frame_rate_is_the_total_variation_between_snapshots():
    from bayesattn_lite import diagnostics
    torch.manual_seed(5)
    model = MHAModel(E=4, H=1).to(DT)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    x, y = _data()
    probe, _ = _data(B=2, seed=9)
    maps = []
    with Monitor(model, every=1, probe=probe) as mon:
        for _ in range(3):
            with torch.no_grad():
                maps.append(monitor._mha_internals(model.mha, (probe, probe, probe),
                                                   {"attn_mask": ~torch.ones(6, 6, dtype=torch.bool).tril()})[0])
            _step(model, x, y, opt)
    summary = mon.summary()["mha"]
    expected = [diagnostics.frame_change(a, b) for a, b in zip(maps[:-1], maps[1:])]
    assert summary["frame_rate"][1:] == pytest.approx(expected, rel=1e-9)


def test_positive_mass_counts_only_queries_with_an_error_signal():
    """Queries whose loss is ignored have u_i = 0 and A_i = 0: they must not count as zero positive mass."""
    torch.manual_seed(6)
    model = MHAModel(E=4, H=1).to(DT)
    x, y = _data()
    y = y.clone()
    y[:, ::2] = -100  # every other position is not scored: no error signal reaches its query
    with Monitor(model, every=1, keep=10) as mon:
        _step(model, x, y)
    rec = mon.last()
    u_norm = rec["u"].norm(dim=-1)
    assert (u_norm[..., ::2] == 0).all() and (u_norm[..., 1::2] > 0).all()
    positive = (rec["alpha"] * (rec["advantage"] > 0)).sum(-1)
    scored = (u_norm > 0) & ((rec["alpha"] > 0).sum(-1) >= 2)
    assert rec["positive_mass"] == pytest.approx(positive[scored].mean().item(), abs=1e-12)
    assert rec["positive_mass"] > positive[(rec["alpha"] > 0).sum(-1) >= 2].mean().item()


@pytest.mark.parametrize("call, name", [
    (lambda: monitor.summarise(torch.rand(1, 1, 4, 4) + 1, torch.randn(1, 1, 4, 2), torch.randn(1, 1, 4, 2)), "alpha"),
    (lambda: monitor.summarise(-torch.softmax(torch.randn(1, 1, 4, 3), -1), torch.randn(1, 1, 4, 2),
                               torch.randn(1, 1, 3, 2)), "alpha"),
])
def test_summarise_refuses_maps_that_are_not_attention(call, name):
    with pytest.raises(ValueError, match=rf"{name}.*expected"):
        call()


def test_summarise_accepts_float32_rows_and_queries_without_keys():
    alpha = torch.softmax(torch.randn(1, 2, 4, 3), -1)  # T != S, float32 rounding
    alpha[0, 0, 0] = 0.0  # a query that sees no key
    b, _, stats = monitor.summarise(alpha, torch.randn(1, 2, 4, 5), torch.randn(1, 2, 3, 5))
    assert b.shape == (1, 2, 4, 3) and math.isfinite(stats["entropy"])
