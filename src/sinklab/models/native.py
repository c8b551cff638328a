"""The native decoder: from the paper's attention-only trigger models to a small modern LM.

One :class:`Transformer` covers both ends:

* the Ran-Milo (2026) trigger models: vectors in, no embedding, no positional encoding, no
  normalisation, no MLP, no biases, unscaled scores, full-width heads, N(0, 0.02) weights;
* a current-style LM: token embedding, RMSNorm pre-normalisation, rotary positions, SwiGLU MLP,
  tied or untied LM head, optional learned sink/register tokens.

Every block fires the named hooks of :mod:`sinklab.core.hooks`, the same names the Hugging Face
adapter fires, so probes and interventions work unchanged on both. Plain attention-only models run
through merged QK and OV circuits when nothing listens inside their attention (:mod:`.circuits`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..core.attention import AttentionSpec, HeadOutput, attend_fast, causal_mask, default_scale, make_norm
from ..core.errors import SinklabError, check
from ..core.hooks import HookSet
from .circuits import attention_only_forward, hooks_inside_attention, merged_circuit_eligible


@dataclass
class ModelConfig:
    """Architecture of a native model. Defaults are the paper's one-layer trigger model.
    Architectures recorded before config version 1 (and before learned positions existed) had none."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[dict] = {0: lambda saved: {"learned_positions": False, **saved}}

    d_model: int = 16
    n_layers: int = 1
    n_heads: int = 1
    head_dim: Optional[int] = None  # None: d_model // n_heads
    attention: AttentionSpec = field(default_factory=AttentionSpec)
    residual: bool = False
    mlp: bool = False  # SwiGLU feed-forward after attention
    mlp_hidden: Optional[int] = None  # None: 8/3 d_model rounded up to a multiple of 8
    norm: bool = False  # RMSNorm pre-normalisation and a final norm
    rope: bool = False
    rope_theta: float = 10000.0
    learned_positions: bool = False  # a learned vector per absolute position, added to the input (GPT-2)
    bias: bool = False
    scale_scores: bool = False  # multiply scores by 1/sqrt(head_dim)
    vocab_size: Optional[int] = None  # None: inputs are vectors of size d_model
    tie_embeddings: bool = True
    sink_tokens: int = 0  # learned tokens prepended to every sequence
    max_seq_len: int = 2048
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check(self.d_model >= 1, f"d_model must be positive, got {self.d_model}")
        check(self.n_layers >= 1, f"the number of layers must be at least 1, got {self.n_layers}")
        check(self.n_heads >= 1, f"the number of heads must be at least 1, got {self.n_heads}")
        if self.head_dim is None:
            check(self.d_model % self.n_heads == 0, f"d_model {self.d_model} is not divisible by {self.n_heads} heads")
            self.head_dim = self.d_model // self.n_heads
        check(self.head_dim >= 1, f"head_dim must be positive, got {self.head_dim}")
        check(not self.rope or self.head_dim % 2 == 0, f"rotary embeddings need an even head_dim, got {self.head_dim}")
        check(not (self.rope and self.learned_positions), "choose rotary or learned positions, not both")
        check(self.sink_tokens >= 0, f"sink_tokens must be >= 0, got {self.sink_tokens}")
        check(self.max_seq_len >= 1, f"max_seq_len must be positive, got {self.max_seq_len}")
        if self.mlp_hidden is None:
            self.mlp_hidden = -(-(8 * self.d_model // 3) // 8) * 8

    def to_dict(self) -> dict:
        return asdict(self)


class Rotary(nn.Module):
    """Rotary position embeddings (Su et al. 2021), rotate-half convention, no learned state."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate x (B, H, T, D) to the given positions (T,)."""
        angles = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq  # (T, D/2)
        cos, sin = angles.cos().repeat(1, 2), angles.sin().repeat(1, 2)  # (T, D)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return (x * cos + rotated * sin).to(x.dtype)


class KVCache:
    """Per-layer keys (before rotation) and values; keeps everything (the ``dense`` policy).

    Keys are stored unrotated and rotated at read time to their index in the cache, so a policy
    that evicts tokens (see :mod:`sinklab.stream.caches`) needs no re-rotation.
    """

    keeps_every_token = True  # False for a policy that evicts: absolute positions then lose count

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's k, v (B, H, T, D); return everything attended to now."""
        if layer in self.keys:
            k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = self.store(k), self.store(v)
        return k, v

    def store(self, t: torch.Tensor) -> torch.Tensor:
        """What to keep for the next step; the dense cache keeps everything."""
        return t


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, hooks: HookSet) -> None:
        super().__init__()
        self.layer, self.hooks = layer, hooks
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.n_heads * cfg.head_dim, bias=cfg.bias)
        self.out = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=cfg.bias)
        self.norm = make_norm(cfg.attention.attn, cfg.n_heads, **cfg.attention.options)
        self.head_out = HeadOutput(cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.attention)
        self.scale = default_scale(cfg.head_dim) if cfg.scale_scores else 1.0

    def forward(self, x, rotary: Optional[Rotary], cache: Optional[KVCache], need_weights: bool = False):
        """x: (B, T, d_model) -> (B, T, d_model), and the weights (B, H, T, Tk) if asked."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, D)
        v = self.head_out.values(v)
        if cache is not None:
            k, v = cache.update(self.layer, k, v)
        n_keys = k.shape[2]
        if rotary is not None:
            positions = torch.arange(n_keys, device=x.device)
            q, k = rotary(q, positions[n_keys - T :]), rotary(k, positions)
        mask = causal_mask(T, n_keys, x.device)
        z, weights = attend_fast(q, k, v, mask, self.norm, self.scale, self.hooks, self.layer, need_weights, plain_causal=True)
        z = self.head_out(z, x)  # (B, H, T, D)
        return self.out(z.transpose(1, 2).reshape(B, T, -1)), weights


class SwiGLU(nn.Module):
    """SwiGLU feed-forward (Shazeer 2020), the Llama layout: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, layer: int, hooks: HookSet) -> None:
        super().__init__()
        self.layer, self.hooks = layer, hooks
        self.gate_proj = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=cfg.bias)
        self.up_proj = nn.Linear(cfg.d_model, cfg.mlp_hidden, bias=cfg.bias)
        self.down_proj = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x):
        hidden = F.silu(self.gate_proj(x)) * self.up_proj(x)  # (B, T, I)
        return self.down_proj(self.hooks.fire(self.layer, "mlp.hook_post", hidden))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, hooks: HookSet) -> None:
        super().__init__()
        self.layer, self.hooks, self.residual = layer, hooks, cfg.residual
        self.attn_norm = nn.RMSNorm(cfg.d_model) if cfg.norm else nn.Identity()
        self.attn = Attention(cfg, layer, hooks)
        self.mlp_norm = nn.RMSNorm(cfg.d_model) if cfg.norm and cfg.mlp else nn.Identity()
        self.mlp = SwiGLU(cfg, layer, hooks) if cfg.mlp else None

    def forward(self, x, rotary, cache, need_weights=False):
        x = self.hooks.fire(self.layer, "hook_resid_pre", x)
        a, weights = self.attn(self.attn_norm(x), rotary, cache, need_weights)
        x = x + a if self.residual else a
        if self.mlp is not None:
            x = x + self.mlp(self.mlp_norm(x))
        return self.hooks.fire(self.layer, "hook_resid_post", x), weights


class Transformer(nn.Module):
    """A decoder built from :class:`ModelConfig`; owns the :class:`HookSet` its blocks fire."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.hooks = HookSet()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model) if cfg.vocab_size else None
        self.sink_tokens = nn.Parameter(torch.zeros(cfg.sink_tokens, cfg.d_model)) if cfg.sink_tokens else None
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta) if cfg.rope else None
        self.positions = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.learned_positions else None
        self.blocks = nn.ModuleList(Block(cfg, i, self.hooks) for i in range(cfg.n_layers))
        self.final_norm = nn.RMSNorm(cfg.d_model) if cfg.norm else nn.Identity()
        self.merged_circuits = merged_circuit_eligible(self)
        self.lm_head = None
        if cfg.vocab_size and not cfg.tie_embeddings:
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, init_std) weights and zero biases (the paper's initialisation), unit norm scales."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.ndim >= 2:
                nn.init.normal_(p, std=self.cfg.init_std)
        for norm in self.modules():
            if isinstance(norm, nn.RMSNorm):
                nn.init.ones_(norm.weight)

    @property
    def n_layers(self) -> int:
        return self.cfg.n_layers

    def forward(self, inputs: torch.Tensor, cache: Optional[KVCache] = None, need_weights: bool = False):
        """Token ids (B, T) or vectors (B, T, d_model) in; logits (B, T, V) or vectors out.

        With ``need_weights`` also returns the list of per-layer attention weights (including
        the positions of prepended sink tokens, whose outputs are dropped). Plain attention-only
        models take the exact merged-circuit path (:func:`~.circuits.attention_only_forward`) when they can.
        """
        x = self._embed(inputs)
        n_prefix = 0
        if self.sink_tokens is not None and (cache is None or len(cache) == 0):
            n_prefix = self.cfg.sink_tokens
            x = torch.cat([self.sink_tokens.to(x.dtype).expand(x.shape[0], -1, -1), x], dim=1)
        n_cached = len(cache) if cache is not None else 0
        n_total = x.shape[1] + n_cached
        check(
            n_total <= self.cfg.max_seq_len,
            f"sequence of {n_total} positions exceeds the model's maximum of {self.cfg.max_seq_len}",
        )
        if self.positions is not None:  # absolute: the index after the cached tokens
            check(
                cache is None or cache.keeps_every_token,
                "a model with learned absolute positions cannot stream through a cache that evicts tokens; "
                "its keys carry their positions",
            )
            x = x + self.positions.weight[n_cached:n_total].to(x.dtype)
        if self.merged_circuits and cache is None and not need_weights and not hooks_inside_attention(self):
            return attention_only_forward(self, x)
        all_weights = []
        for block in self.blocks:
            x, weights = block(x, self.rotary, cache, need_weights)
            all_weights.append(weights)
        out = self._unembed(self.final_norm(x[:, n_prefix:]))
        return (out, all_weights) if need_weights else out

    def _embed(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.embed is None:
            if inputs.ndim != 3 or inputs.shape[-1] != self.cfg.d_model:
                raise SinklabError(f"expected vectors of shape (B, T, {self.cfg.d_model}), got {tuple(inputs.shape)}")
            return inputs
        if inputs.ndim != 2 or inputs.dtype not in (torch.int32, torch.int64):
            raise SinklabError(f"expected token ids of shape (B, T), got {tuple(inputs.shape)} {inputs.dtype}")
        return self.embed(inputs)

    def _unembed(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is None:
            return x
        if self.lm_head is not None:
            return self.lm_head(x)
        return F.linear(x, self.embed.weight)

    def down_proj_weight(self, layer: int) -> Optional[torch.Tensor]:
        """(d_model, I) weight that writes FFN neurons into the residual stream, if the model has an MLP."""
        mlp = self.blocks[layer].mlp
        return mlp.down_proj.weight if mlp is not None else None
