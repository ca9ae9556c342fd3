"""The four architectures of the comparison (chapter 8), behind one interface.

Every model maps tokens (B, T) long to logits (B, T, n_classes) and is causal: the logits at
position t depend on tokens 0..t only. The four differ in *how* a position reads the past:

- ``Transformer``  attention: weights softmax(q_t . k_s) that depend on the content at both
                   ends, t and s (content-based routing)
- ``SelectiveSSM`` a Mamba-style selective state-space model: a linear recurrence whose step
                   size Delta_t and read/write vectors B_t, C_t are functions of the input, so the
                   weight of token s at time t depends on the content at s, at t and in between
- ``LSTMModel``    an LSTM: gates depend on the current input and the previous state only
- ``WindowMLP``    an MLP over the last ``window`` tokens: fixed, position-based mixing

``REGISTRY`` holds one ``Architecture`` entry per model: its class, its sizes at the course's CPU
scale (parameter counts within a factor ``PARAM_MATCH_FACTOR`` of each other) and at Paper I's
(millions of parameters, for a GPU), its colour in every figure and its training cost.
``build(name, vocab_size, n_classes, **sizes)`` makes any of them; ``sizes(name, scale)`` is the one
size rule. A fifth architecture is one more entry (and its shipped weights: CONTRIBUTING.md).

The Transformer's attention layers are ``CausalSelfAttention`` modules with five hook points
(``nn.Identity``, ``PROBES``) that chapters 7-9 read: ``run_with_probes`` returns what passed
through them; ``has_probes`` is the one rule that finds such a layer (``run_with_probes`` and
``monitor``'s training hooks both use it)::

    probe_q, probe_k, probe_v  (B, H, T, d_head)   queries, keys, values
    probe_alpha                (B, H, T, T)        attention weights (rows sum to 1)
    probe_g                    (B, H, T, d_head)   per-head outputs g_i = sum_j alpha_ij v_j,
                                                   before the output projection; a full
                                                   backward hook on it gives u = dL/dg
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import _validate
from ._types import Distinct, Finite, Float, OneOf, Tensor, TokenIds, Whole, checked


# ----------------------------------------------------------------------------- validation

def _check_tokens(tokens, vocab_size, max_len=None):
    """What the forwards' annotation, TokenIds[Tensor, "B T"], cannot say: T >= 1, at most max_len,
    values in [0, vocab_size)."""
    if tokens.shape[1] < 1:
        _validate.fail("tokens", "shape (B, T) with T >= 1", tuple(tokens.shape))
    if max_len is not None and tokens.shape[1] > max_len:
        _validate.fail("tokens", f"at most max_len={max_len} positions (the model's; a longer horizon needs a model "
                       "built with a larger max_len)", tokens.shape[1])
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        _validate.fail("tokens", f"values in [0, {vocab_size}), the model's vocabulary (a model built for another "
                       "task, or with another vocab_size, reads other tokens)",
                       f"values in [{tokens.min().item()}, {tokens.max().item()}]", described=True)


class _Model(nn.Module):
    """What the four share: validated sizes, an embedding, a readout to n_classes."""

    @checked
    def __init__(self, vocab_size: Whole(2), n_classes: Whole(2), d_model: Whole(1)):
        super().__init__()
        self.vocab_size = vocab_size
        self.n_classes = n_classes
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.max_len = None  # only models with position embeddings have a limit


# ----------------------------------------------------------------------------- transformer

# The probe points of every attention layer: identity modules a forward hook can read
# (``run_with_probes``, ``monitor``).
PROBES = ("probe_q", "probe_k", "probe_v", "probe_alpha", "probe_g")


@checked
class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention written out (no fused kernel), so every quantity of the
    paper passes through a probe: q, k, v, alpha and g = alpha v, before the output projection."""

    @checked
    def __init__(self, d_model: Whole(1), n_heads: Whole(1)):
        super().__init__()
        if d_model % n_heads:
            _validate.fail("n_heads", f"a divisor of d_model={d_model}", n_heads)
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        for probe in PROBES:
            setattr(self, probe, nn.Identity())

    @checked
    def forward(self, x: Float[Tensor, "B T d_model"], bias: Float[Tensor, "H T T"] | None = None):
        B, T, D = x.shape
        if D != self.proj.out_features:
            _validate.fail("x", f"(B, T, d_model={self.proj.out_features}) for this layer", tuple(x.shape))
        if bias is not None and bias.shape[0] != self.n_heads:   # one (T, T) bias per head, not a broadcast
            _validate.fail("bias", f"shape (H={self.n_heads}, T={T}, T={T}): one (T, T) bias per head", bias)
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        q, k, v = self.probe_q(q), self.probe_k(k), self.probe_v(v)            # (B, H, T, d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)             # (B, H, T, T)
        if bias is not None:                                                   # (H, T, T), e.g. recency
            scores = scores + bias
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        alpha = self.probe_alpha(scores.masked_fill(future, float("-inf")).softmax(-1))
        g = self.probe_g(alpha @ v)                                            # (B, H, T, d_head)
        return self.proj(g.transpose(1, 2).reshape(B, T, D))


class _Block(nn.Module):
    """Pre-LayerNorm residual block: x + mixer(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, d_model, mixer):
        super().__init__()
        self.ln1, self.mixer, self.ln2 = nn.LayerNorm(d_model), mixer, nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, **mixer_kwargs):
        x = x + self.mixer(self.ln1(x), **mixer_kwargs)
        return x + self.mlp(self.ln2(x))


@checked
class Transformer(_Model):
    """A small GPT-style causal transformer: token + learned position embeddings, ``n_layers``
    pre-LN blocks of ``CausalSelfAttention`` (``n_heads`` heads) and a 4x MLP, a linear readout.

    ``stream_start`` (None: off) is for sequences made of a fixed-length prefix and then a stream
    of any length, like the HMM's matrices and its observations. Positions before it keep their own
    learned embedding (the prefix is a table read by position); every position from it on shares
    one, and attention between two stream positions i >= j gets ALiBi's recency bias
    -m_h (i - j), m_h = 2^-h for head h = 1..H (Press et al. 2022). So the stream's order is read
    by distance alone and no position past the trained horizon is a vector training never reached:
    such a model can be tested at longer horizons fairly (chapter 8).
    """

    @checked
    def __init__(self, vocab_size, n_classes, d_model=64, n_layers: Whole(1) = 2, n_heads: Whole(1) = 4,
                 max_len: Whole(1) = 512, stream_start: Whole(0) | None = None):
        super().__init__(vocab_size, n_classes, d_model)
        self.max_len = max_len
        self.stream_start = None if stream_start is None else stream_start
        if self.stream_start is not None:
            if self.stream_start >= max_len:
                _validate.fail("stream_start", f"below max_len={max_len}", stream_start)
            self.max_len = None  # the stream may be as long as it likes
            self.register_buffer("slopes", 2.0 ** -torch.arange(1, n_heads + 1, dtype=torch.float32), persistent=False)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, CausalSelfAttention(d_model, n_heads))
                                    for _ in range(n_layers))
        self.ln_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, n_classes)

    def attention_layers(self):
        """The ``CausalSelfAttention`` modules, first layer first."""
        return [block.mixer for block in self.blocks]

    def _stream_bias(self, T, device):
        """(H, T, T) recency bias -m_h (i - j) between stream positions i, j >= stream_start, 0 elsewhere."""
        t = torch.arange(T, device=device)
        both = (t[:, None] >= self.stream_start) & (t[None, :] >= self.stream_start)
        distance = (t[:, None] - t[None, :]).clamp_min(0) * both
        return -self.slopes[:, None, None] * distance

    @checked
    def forward(self, tokens: TokenIds[Tensor, "B T"]):
        """Logits (B, T, n_classes): at each position, the answer given the tokens up to it."""
        _check_tokens(tokens, self.vocab_size, self.max_len)
        T = tokens.shape[1]
        positions = torch.arange(T, device=tokens.device)
        bias = None
        if self.stream_start is not None:
            positions = positions.clamp_max(self.stream_start)
            bias = self._stream_bias(T, tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, bias=bias)
        return self.head(self.ln_f(x))


# ----------------------------------------------------------------------------- selective SSM

def _shift(x, k):
    """x delayed by k steps along dim 1, zeros in front: out[:, t] = x[:, t - k]."""
    return F.pad(x, [0, 0] * (x.dim() - 2) + [k, 0])[:, :x.shape[1]]


@checked
def selective_scan(a: Finite[Float[Tensor, "B T *rest"]], b: Finite[Float[Tensor, "B T *rest"]]):
    """h_t = a_t * h_{t-1} + b_t with h_{-1} = 0, along dim 1, for all t at once.

    A parallel (Hillis-Steele) scan: the pairs (a, b) compose associatively,
    (a1, b1) then (a2, b2) = (a1 a2, a2 b1 + b2), so ceil(log2 T) rounds of whole-tensor
    operations replace T sequential steps. Only products of the a_t (in (0, 1] for a stable
    SSM) are formed, never their inverses, so it is as stable as the recurrence itself.
    Works on any device; a and b have the same shape (B, T, ...).
    """
    T, offset = a.shape[1], 1
    while offset < T:
        # position t absorbs the composed segment ending at t - offset (zeros before the start)
        b = b + a * _shift(b, offset)
        if 2 * offset < T:  # the last round needs no new products
            a = a * _shift(a, offset)
        offset *= 2
    return b


@checked
def sequential_scan(a: Finite[Float[Tensor, "B T *rest"]], b: Finite[Float[Tensor, "B T *rest"]]):
    """The same recurrence one step at a time: the reference the parallel scan is tested against."""
    h, out = torch.zeros_like(b[:, 0]), []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return torch.stack(out, dim=1)


@checked
class SelectiveSSMLayer(nn.Module):
    """One Mamba block (Gu & Dao 2023) in plain PyTorch, without the fused CUDA kernel.

    x -> (u, z) by a linear map; u -> causal depthwise conv -> SiLU; then per channel d and state n

        Delta_t = softplus(W_dt u_t)          (input-dependent step size, per channel)
        B_t, C_t = W_B u_t, W_C u_t          (input-dependent write / read vectors, shared)
        h_t = exp(Delta_t A) * h_{t-1} + Delta_t B_t u_t     (A = -exp(A_log) < 0: decays)
        y_t = C_t . h_t + D u_t,   out_t = W_out (y_t * SiLU(z_t))

    Unrolled, y_t = sum_{s<=t} C_t . [prod_{r=s+1..t} exp(Delta_r A)] Delta_s B_s u_s: the weight
    of source s at time t depends on the input at t (C_t), at s (Delta_s, B_s) and between (gates).
    """

    def __init__(self, d_model, d_state=16, expand=2, d_conv=4):
        super().__init__()
        d_model, d_state, expand, d_conv = (_validate.integer(name, value, 1) for name, value in (
            ("d_model", d_model), ("d_state", d_state), ("expand", expand), ("d_conv", d_conv)))
        d_inner = expand * d_model
        self.d_state, self.dt_rank = d_state, max(1, math.ceil(d_model / 16))
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner)
        # Mamba's initialisation: A_n = -n (a spread of decay rates), Delta between 1e-3 and 1e-1
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(d_inner, 1))
        self.D = nn.Parameter(torch.ones(d_inner))
        dt = torch.exp(torch.rand(d_inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def _gates(self, x):
        """u, z (B, T, d_inner); Delta (B, T, d_inner); B, C (B, T, d_state): all from the input."""
        if x.shape[-1] != self.in_proj.in_features:   # the annotations check the rest; a type cannot say this width
            _validate.fail("x", f"(B, T, d_model={self.in_proj.in_features}) for this layer", tuple(x.shape))
        T = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :T].transpose(1, 2))  # left padding only: causal
        dt, B, C = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        return u, z, F.softplus(self.dt_proj(dt)), B, C

    @checked
    def ssm_inputs(self, x: Float[Tensor, "B T d_model"]):
        """(a, b, C, u, z) of the recurrence h_t = a_t h_{t-1} + b_t, for tests and figures."""
        u, z, delta, B, C = self._gates(x)
        a = torch.exp(delta.unsqueeze(-1) * -torch.exp(self.A_log))            # (B, T, d_inner, N)
        b = (delta * u).unsqueeze(-1) * B.unsqueeze(2)                         # (B, T, d_inner, N)
        return a, b, C, u, z

    @checked
    def mixing_weights(self, x: Finite[Float[Tensor, "B T d_model"]]):
        """omega (B, d_inner, T, T): the unrolled weights, C_t . h_t = sum_s omega_ts u_s, with
        omega_ts = sum_n C_tn [prod_{r=s+1..t} exp(Delta_r A_n)] Delta_s B_sn  (0 for s > t).
        Attention's alpha_ts, for a selective SSM (chapter 8 compares the two)."""
        _, _, delta, B, C = self._gates(x)
        log_decay = torch.cumsum(delta.unsqueeze(-1) * -torch.exp(self.A_log), dim=1)  # (B, T, D, N)
        T = x.shape[1]
        gap = log_decay.unsqueeze(2) - log_decay.unsqueeze(1)                  # [t, s] = L_t - L_s
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        gap = gap.masked_fill(~causal[None, :, :, None, None], float("-inf"))  # exp -> 0 above the diagonal
        write = delta.unsqueeze(-1) * B.unsqueeze(2)                            # (B, T_s, D, N)
        omega = torch.einsum("btn,btsdn,bsdn->bdts", C, gap.exp(), write)
        return omega

    @checked
    def forward(self, x: Float[Tensor, "B T d_model"], scan=selective_scan):
        a, b, C, u, z = self.ssm_inputs(x)
        # the layer's own a, b, unchecked (``__wrapped__``): a NaN check at every step would cost a pass over them
        h = getattr(scan, "__wrapped__", scan)(a, b)
        y = (h @ C.unsqueeze(-1)).squeeze(-1) + self.D * u
        return self.out_proj(y * F.silu(z))


class _SSMBlock(nn.Module):
    def __init__(self, d_model, d_state):
        super().__init__()
        self.norm, self.mixer = nn.LayerNorm(d_model), SelectiveSSMLayer(d_model, d_state)

    def forward(self, x, scan=selective_scan):
        return x + self.mixer(self.norm(x), scan=scan)


@checked
class SelectiveSSM(_Model):
    """A Mamba-style model: embedding, ``n_layers`` residual ``SelectiveSSMLayer`` blocks, readout.
    No position embedding: the recurrence itself knows order, and any length runs."""

    @checked
    def __init__(self, vocab_size, n_classes, d_model=64, n_layers: Whole(1) = 2, d_state: Whole(1) = 16):
        super().__init__(vocab_size, n_classes, d_model)
        self.blocks = nn.ModuleList(_SSMBlock(d_model, d_state) for _ in range(n_layers))
        self.norm_f, self.head = nn.LayerNorm(d_model), nn.Linear(d_model, n_classes)

    @checked
    def forward(self, tokens: TokenIds[Tensor, "B T"], scan=selective_scan):
        """Logits (B, T, n_classes); ``scan=sequential_scan`` runs the plain recurrence (the tests
        compare the two)."""
        _check_tokens(tokens, self.vocab_size)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, scan=scan)
        return self.head(self.norm_f(x))


# ----------------------------------------------------------------------------- LSTM and MLP

@checked
class LSTMModel(_Model):
    """Embedding, a ``n_layers`` LSTM of width d_model (torch's cuDNN/CPU kernel), readout."""

    @checked
    def __init__(self, vocab_size, n_classes, d_model=64, n_layers: Whole(1) = 1):
        super().__init__(vocab_size, n_classes, d_model)
        self.lstm = nn.LSTM(d_model, d_model, num_layers=n_layers, batch_first=True)
        self.head = nn.Linear(d_model, n_classes)

    @checked
    def forward(self, tokens: TokenIds[Tensor, "B T"]):
        """Logits (B, T, n_classes): at each position, the answer given the tokens up to it."""
        _check_tokens(tokens, self.vocab_size)
        return self.head(self.lstm(self.embed(tokens))[0])


@checked
class WindowMLP(_Model):
    """An MLP that sees the embeddings of the last ``window`` tokens (zeros before the start),
    concatenated in a fixed order, plus the embedding of the absolute position: it knows where it
    is but can only mix a fixed set of offsets, with weights that do not depend on content."""

    @checked
    def __init__(self, vocab_size, n_classes, d_model=64, window: Whole(1) = 8, hidden: Whole(1) = 256,
                 max_len: Whole(1) = 512):
        super().__init__(vocab_size, n_classes, d_model)
        self.window = window
        self.max_len = max_len
        self.pos = nn.Embedding(max_len, d_model)
        self.mlp = nn.Sequential(nn.Linear((window + 1) * d_model, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_classes))

    @checked
    def forward(self, tokens: TokenIds[Tensor, "B T"]):
        """Logits (B, T, n_classes): at each position, the answer given the tokens up to it."""
        _check_tokens(tokens, self.vocab_size, self.max_len)
        T = tokens.shape[1]
        e = F.pad(self.embed(tokens), (0, 0, self.window - 1, 0))       # (B, window-1+T, d)
        # frame t holds tokens t-window+1 .. t: unfold makes the windows without a copy per t
        frames = e.unfold(1, self.window, 1).flatten(2)                   # (B, T, d * window)
        pos = self.pos(torch.arange(T, device=tokens.device)).expand(tokens.shape[0], -1, -1)
        return self.mlp(torch.cat([frames, pos], dim=-1))


# ----------------------------------------------------------------------------- the registry

@dataclass(frozen=True)
class Architecture:
    """One architecture of the comparison, and everything the course keys by its name.

    cls               the model class, called as cls(vocab_size, n_classes, **sizes)
    small             its constructor sizes at the course's CPU scale (scale "small")
    paper             Paper I's scale (scale "paper"): what changes on top of ``small``
    colour            its colour in every figure (chapters 7-9; an Okabe-Ito colour)
    cost              milliseconds per step of batch 64 on one CPU thread, measured: the training
                      script starts the longest runs first, so that its workers finish together
    gpu_step_seconds  the assumed floor of one paper-size step on a GPU (``converged.cost_estimate``)
    """

    name: str
    cls: type
    small: dict
    paper: dict
    colour: str
    cost: float
    gpu_step_seconds: float


# CPU sizes (the chapter's table): small enough for seconds per run on one core, and with
# parameter counts within PARAM_MATCH_FACTOR of each other (16k-19k at the CPU wind tunnels'
# vocabularies; Mamba's d_state is 4 because its (B, T, channels, d_state) state dominates
# the CPU time). max_len 128 covers the CPU HMM task at horizon K = 50.
# Paper I's models have 2.7M-7.4M parameters; the paper sizes land in that range (a GPU run).
REGISTRY = {a.name: a for a in (
    Architecture("transformer", Transformer, small=dict(d_model=24, n_layers=2, n_heads=2, max_len=128),
                 paper=dict(d_model=256, n_layers=4, n_heads=8), colour="#0072B2",  # blue
                 cost=1.0, gpu_step_seconds=0.01),
    Architecture("mamba", SelectiveSSM, small=dict(d_model=32, n_layers=2, d_state=4),
                 paper=dict(d_model=256, n_layers=8, d_state=16), colour="#009E73",  # green
                 cost=4.0, gpu_step_seconds=0.03),
    Architecture("lstm", LSTMModel, small=dict(d_model=44, n_layers=1),
                 paper=dict(d_model=512, n_layers=2), colour="#E69F00",  # orange
                 cost=0.6, gpu_step_seconds=0.01),
    Architecture("mlp", WindowMLP, small=dict(d_model=16, window=8, hidden=72, max_len=128),
                 paper=dict(d_model=128, window=16, hidden=1024), colour="#D55E00",  # vermilion
                 cost=0.6, gpu_step_seconds=0.005),
)}
ARCHITECTURES = tuple(REGISTRY)
PARAM_MATCH_FACTOR = 1.25  # largest / smallest parameter count across the four at the CPU scale, tested


@checked
def sizes(name, scale: OneOf("small", "paper") = "small", **overrides):
    """The one size rule: the constructor kwargs of ``name`` at ``scale`` ("small": the entry's
    ``small``; "paper": its ``paper`` over them), then ``overrides`` on top. An override changes
    only what it names: ``sizes("transformer", "paper", n_layers=1)`` keeps d_model 256."""
    _validate.choice("architecture", name, ARCHITECTURES)
    arch = REGISTRY[name]
    known = [p for p in inspect.signature(arch.cls).parameters if p not in ("vocab_size", "n_classes")]
    unknown = sorted(set(overrides) - set(known))
    if unknown:   # a misspelt size would be ignored without a word
        _validate.fail("overrides", f"sizes of a {name}, from {known}", unknown)
    checked = {k: v if k == "stream_start" and v is None else _validate.integer(k, v, 0 if k == "stream_start" else 1)
               for k, v in overrides.items()}
    out = {**arch.small, **(arch.paper if scale == "paper" else {}), **checked}
    if "n_heads" in out and out["d_model"] % out["n_heads"]:
        _validate.fail("n_heads", f"a divisor of d_model={out['d_model']} (each head gets d_model / n_heads)",
                       out["n_heads"])
    return out


@checked
def build(name, vocab_size: Whole(2), n_classes: Whole(2), **sizes_):
    """The ``name`` model at the CPU scale (``sizes(name)``), any of its sizes overridden by ``sizes_``."""
    kwargs = sizes(name, "small", **sizes_)  # checks the name first
    return REGISTRY[name].cls(vocab_size, n_classes, **kwargs)


@checked
def count_parameters(model: nn.Module):
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ----------------------------------------------------------------------------- reading the probes

def has_probes(module):
    """Whether ``module`` is an attention layer with the probe points (``PROBES``): the one rule that
    finds attention layers, in ``run_with_probes`` and in ``monitor``."""
    return all(isinstance(getattr(module, p, None), nn.Module) for p in PROBES)


def _keeper(record, key):
    """A forward hook that stores its module's output (detached) in ``record[key]``."""
    def hook(module, args, out):
        record[key] = out.detach()
    return hook


@checked
def run_with_probes(model: nn.Module, inputs, names: Distinct("probe names", "a name", "probe") = PROBES):
    """Run ``model(inputs)`` without gradients and return what passed through the probe points
    ``names`` of every attention layer (``has_probes``, in model order, the model itself included):
    a list indexed by layer of dicts probe name without "probe_" -> tensor, e.g. "k" (B, H, T, d_head),
    "alpha" (B, H, T, T). ``inputs`` is what the model takes: tokens for a model of this module, a
    (B, T, d_model) tensor for a bare ``CausalSelfAttention``."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)) or not names or not set(names) <= set(PROBES):
        _validate.fail("names", f"a non-empty list of probe names from {PROBES}", names)
    layers = [m for m in model.modules() if has_probes(m)]
    if not layers:
        _validate.fail("model", f"a model with attention layers carrying the probe points {PROBES}",
                       f"none in {type(model).__name__}", described=True)
    records = [{} for _ in layers]
    handles = [getattr(layer, p).register_forward_hook(_keeper(record, p[len("probe_"):]))
               for record, layer in zip(records, layers) for p in names]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return records
