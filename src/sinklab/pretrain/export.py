"""A ``sinklab pretrain`` run as a Hugging Face ``LlamaForCausalLM`` folder (safetensors, config.json,
a tokenizer), so every command that takes a model folder (scan, stream, compress, adapt, bench)
measures a model sinklab trained exactly as it measures a downloaded one.

A text run's native decoder is a Llama, and the mapping is exact rather than approximate:

* rotary positions: :class:`~sinklab.models.native.Rotary` rotates halves (``cat(-x2, x1)`` with
  frequencies ``theta ** (-2i / D)``), which is transformers' ``rotate_half`` convention, so the
  q and k rows are copied as they are; only weights from the interleaved-pairs convention (Meta's
  original checkpoints) would need their rows permuted;
* RMSNorm: ``torch.nn.RMSNorm`` built without an eps, as the native blocks are, adds the machine
  epsilon of the input's dtype, ``2**-23`` in float32 (pretraining computes in float32), so that
  is ``rms_norm_eps``; Llama's usual 1e-6 would move every logit by about 1e-3 relative;
* attention: the fused ``qkv`` rows are q, k then v, each head-major (Llama's layout), one key and
  value head per query head, scores scaled by ``1/sqrt(head_dim)`` as Llama always does, causal
  softmax; biases, if a model has them, are Llama's ``attention_bias`` and ``mlp_bias``;
* SwiGLU ``down(silu(gate(x)) * up(x))`` is Llama's MLP; the final norm and a tied or untied head.

What Llama cannot express is refused in one line (:func:`check_exportable`), and a native
parameter the mapping would leave behind is refused too, so a future extra cannot be dropped
silently. Before the folder appears, both models score the same ids and the tokenizer encodes a
probe text: a folder whose logits or ids differ is never written (:func:`self_check`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

import torch

from ..core.atomic import atomic_dir
from ..core.checkpoint import checkpoint_state, latest_checkpoint
from ..core.errors import NumericalCheckFailed, check
from ..core.provenance import package_versions
from ..core.runs import config_record
from ..models.native import ModelConfig, Transformer
from .config import PretrainConfig
from .trained import load_trained

#: The special tokens of an exported byte tokenizer: the end-of-document id 256, and the reserved
#: first-token id 257 of a ``--bos`` run (named as :func:`.tokens.decode` shows it).
EOD_TOKEN, BOS_TOKEN = "<|endoftext|>", "<bos>"
#: float32's machine epsilon: what ``nn.RMSNorm(d)`` (eps=None) adds at the dtype pretraining uses.
NATIVE_RMS_EPS = torch.finfo(torch.float32).eps
#: Largest difference of logits allowed by the export's own check, relative to the largest logit.
SELF_CHECK_TOLERANCE = 1e-5
PROBE_TEXT = "Sinks, ça va? 水 ☃ 🐍 <|endoftext|> <bos>\n\t" + "".join(chr(c) for c in range(1, 0x180))


def export_llama(run_dir, folder, overwrite: bool = False) -> Path:
    """Write the model of the pretraining run ``run_dir`` (its last checkpoint) as a transformers
    ``LlamaForCausalLM`` folder at ``folder``, with a byte tokenizer; returns the folder.

    The folder is built beside its target and renamed into place once complete, so an interrupted
    export leaves nothing half-written. An existing ``folder`` is refused unless ``overwrite`` is
    set and it is an earlier sinklab export (its config.json has a ``sinklab`` entry); anything
    else there is never removed. config.json's ``sinklab`` entry records where the model came
    from: the run directory, the checkpoint's step, the pretraining configuration, the version."""
    run, target = Path(run_dir), Path(folder)
    _clear_target(target, overwrite)
    native, cfg = load_trained(run)
    check_exportable(cfg, native.cfg, str(run))
    eod, bos = 256, (257 if cfg.bos else None)
    hf = llama_model(native, eod, bos)
    tokenizer = byte_tokenizer(bos is not None)
    self_check(native, hf, tokenizer)
    hf.config.sinklab = {
        "exported_from": str(run.resolve()),
        "step": checkpoint_state(latest_checkpoint(run))["step"],
        "variant": cfg.variant,
        "pretrain_config": config_record(cfg),
        "versions": package_versions(),
    }
    with atomic_dir(target) as tmp:
        hf.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        check(not list(tmp.glob("*.bin")), "transformers wrote pickled weights; sinklab exports safetensors only")
        _follow_umask(tmp)
    return target


def _follow_umask(folder: Path) -> None:
    """The temporary folder (and what safetensors writes into it) is private; a model folder is
    for sharing, so it takes the permissions the umask gives, as sinklab's result files do."""
    mask = os.umask(0)
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~mask)


def _clear_target(target: Path, overwrite: bool) -> None:
    if not target.exists():
        return
    check(
        overwrite,
        f"{target} exists already; choose a new folder (or pass --overwrite to replace an earlier sinklab export)",
    )
    check(
        exported_from(target) is not None,
        f"{target} is not an earlier sinklab export (no config.json with a sinklab entry); not removing it",
    )
    shutil.rmtree(target)


def check_exportable(cfg: PretrainConfig, arch: ModelConfig, run: str = "the run") -> None:
    """Refuse, in one line each, a run whose model or tokenizer a Llama folder cannot hold exactly.

    The default tokenizer is refused because the model's ids are a compacted SmolLM2 vocabulary
    (only the tokens the corpus used): the full tokenizer would emit ids the model has no rows for,
    and a Llama over the full vocabulary would spread probability over tokens the native model
    cannot predict; a BPE cut down to the compacted tokens would tokenise differently (its merges
    pass through tokens that were dropped). Bytes need no such surgery."""
    check(
        cfg.corpus_kind == "text",
        f"{run} trained on the synthetic Bigram-Backcopy task, whose symbols are not text a tokenizer encodes; "
        "only text runs export",
    )
    check(
        cfg.tokenizer == "bytes",
        f"{run} uses the default tokenizer, a compacted SmolLM2 vocabulary no Hugging Face tokenizer reproduces exactly; "
        "pretrain with --tokenizer bytes to export",
    )
    spec = arch.attention
    check(
        spec.attn == "softmax" and not spec.options,
        f"{run} uses {spec.attn} attention; Llama computes plain softmax attention only",
    )
    check(not spec.extras, f"{run} has the per-head extras {', '.join(spec.extras)}, which Llama has no place for")
    check(arch.sink_tokens == 0, f"{run} has {arch.sink_tokens} learned sink tokens, which Llama has no place for")
    check(arch.rope, f"{run} has {cfg.positions} positions; Llama encodes positions with rotary embeddings only")
    check(
        arch.residual and arch.mlp and arch.norm and arch.scale_scores,
        f"{run} is not a pre-norm residual decoder with an MLP and 1/sqrt(head_dim) scores, the Llama layout",
    )
    expected, parts = 257 + int(cfg.bos), "bytes, end of document" + (" and BOS" if cfg.bos else "")
    check(arch.vocab_size == expected, f"{run} has a vocabulary of {arch.vocab_size}, not the {expected} of {parts}")


def llama_model(native: Transformer, eod: int, bos: Optional[int]):
    """The ``LlamaForCausalLM`` (float32, eval mode) computing what ``native`` computes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    arch = native.cfg
    config = LlamaConfig(
        vocab_size=arch.vocab_size,
        hidden_size=arch.d_model,
        intermediate_size=arch.mlp_hidden,
        num_hidden_layers=arch.n_layers,
        num_attention_heads=arch.n_heads,
        num_key_value_heads=arch.n_heads,
        head_dim=arch.head_dim,
        hidden_act="silu",
        max_position_embeddings=arch.max_seq_len,
        rms_norm_eps=NATIVE_RMS_EPS,
        rope_parameters={"rope_type": "default", "rope_theta": float(arch.rope_theta)},
        attention_bias=arch.bias,
        mlp_bias=arch.bias,
        tie_word_embeddings=arch.tie_embeddings,
        bos_token_id=eod if bos is None else bos,
        eos_token_id=eod,
        dtype="float32",
    )
    hf = LlamaForCausalLM(config).to(torch.float32)
    hf.load_state_dict(llama_weights(native), strict=True)
    return hf.eval()


def llama_weights(native: Transformer) -> dict[str, torch.Tensor]:
    """The native state dict under Llama's names. Every native tensor must land somewhere: one the
    mapping does not know (a future extra) is refused rather than dropped."""
    arch = native.cfg
    left = {k: v.detach().float() for k, v in native.state_dict().items()}
    width = arch.n_heads * arch.head_dim
    out = {"model.embed_tokens.weight": left.pop("embed.weight")}
    for i in range(arch.n_layers):
        n, h = f"blocks.{i}", f"model.layers.{i}"
        out[f"{h}.input_layernorm.weight"] = left.pop(f"{n}.attn_norm.weight")
        out[f"{h}.post_attention_layernorm.weight"] = left.pop(f"{n}.mlp_norm.weight")
        for kind in ("weight", "bias") if arch.bias else ("weight",):
            # q, k, v rows as they are: both sides rotate halves, so no permutation
            for proj, rows in zip(("q_proj", "k_proj", "v_proj"), left.pop(f"{n}.attn.qkv.{kind}").split(width)):
                out[f"{h}.self_attn.{proj}.{kind}"] = rows
            out[f"{h}.self_attn.o_proj.{kind}"] = left.pop(f"{n}.attn.out.{kind}")
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[f"{h}.mlp.{proj}.{kind}"] = left.pop(f"{n}.mlp.{proj}.{kind}")
    out["model.norm.weight"] = left.pop("final_norm.weight")
    out["lm_head.weight"] = out["model.embed_tokens.weight"] if arch.tie_embeddings else left.pop("lm_head.weight")
    check(not left, f"the native tensor {next(iter(left), '')} has no Llama counterpart; the model cannot be exported exactly")
    return out


def byte_symbols() -> list[str]:
    """The printable character that stands for each byte in byte-level BPE (GPT-2's table, which
    transformers' ByteLevel pre-tokenizer and decoder use): printable Latin-1 bytes stand for
    themselves, the others take the characters from U+0100 on, in byte order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    symbols, spare = [], 0
    for b in range(256):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(256 + spare))
            spare += 1
    return symbols


def byte_tokenizer(with_bos: bool):
    """A fast tokenizer whose ids are the UTF-8 bytes of the text, as ``--tokenizer bytes`` trained.

    A ByteLevel pre-tokenizer turns each byte into its printable stand-in (:func:`byte_symbols`)
    and a BPE model with exactly those 256 symbols, at their byte values, and no merges, maps each
    to its id; the ByteLevel decoder turns ids back into bytes. The end of document is id 256 and
    the end-of-sequence token. BOS: a ``--bos`` run put its reserved id 257 first in every
    window, so that is BOS; otherwise training saw documents joined as ``doc EOD doc EOD ...``, so
    every document but the first began right after an EOD, and the EOD is the BOS as well (as
    GPT-2's ``<|endoftext|>`` is). The tokenizer itself adds nothing (``tokenizer(text)`` is the
    bytes exactly); sinklab's commands prepend the BOS id themselves (``--bos auto``), and the
    special tokens' spellings in a text stay bytes (``split_special_tokens``), so no text can
    smuggle in an id the bytes did not give. No ``model_max_length``: sinklab encodes whole corpora
    before cutting windows, which a limit would flood with warnings; the model's limit is
    config.json's ``max_position_embeddings``, which the commands read."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    symbols = byte_symbols()
    check(set(symbols) == set(pre_tokenizers.ByteLevel.alphabet()), "the tokenizers library's byte alphabet changed")
    core = Tokenizer(models.BPE(vocab={s: b for b, s in enumerate(symbols)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    specials = [EOD_TOKEN, BOS_TOKEN] if with_bos else [EOD_TOKEN]
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    check(
        [core.token_to_id(t) for t in specials] == list(range(256, 256 + len(specials))),
        "the special tokens did not take the ids after the bytes",
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOD_TOKEN,
        bos_token=BOS_TOKEN if with_bos else EOD_TOKEN,
        split_special_tokens=True,
        clean_up_tokenization_spaces=False,
    )


@torch.no_grad()
def self_check(native: Transformer, hf, tokenizer) -> None:
    """Refuse to write an export that is not exact: the tokenizer must give the UTF-8 bytes of a probe
    text (every Latin-1 character, several scripts, the special tokens' spellings) and decode
    them back, and both models' logits on fixed random ids must agree to
    :data:`SELF_CHECK_TOLERANCE` of the largest logit."""
    ids = tokenizer(PROBE_TEXT)["input_ids"]
    if ids != list(PROBE_TEXT.encode("utf-8")) or tokenizer.decode(ids) != PROBE_TEXT:
        raise NumericalCheckFailed("the exported tokenizer does not give the UTF-8 bytes of a text; nothing was written")
    arch = native.cfg
    probe = torch.randint(arch.vocab_size, (2, min(arch.max_seq_len, 64)), generator=torch.Generator().manual_seed(0))
    want, got = native(probe), hf(probe).logits
    error = ((got - want).abs().max() / want.abs().max().clamp_min(1.0)).item()
    if not error <= SELF_CHECK_TOLERANCE:
        raise NumericalCheckFailed(
            f"the Llama model's logits differ from the native model's by {error:.2e} of the largest logit "
            f"(tolerance {SELF_CHECK_TOLERANCE:g}); nothing was written"
        )


def exported_from(folder) -> Optional[dict]:
    """The ``sinklab`` entry of an exported folder's config.json: where its model came from (None
    for any other folder, or one without a readable config.json)."""
    try:
        entry = json.loads((Path(folder) / "config.json").read_text()).get("sinklab")
    except (OSError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, dict) else None
