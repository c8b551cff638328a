"""``sinklab export``: a pretraining run as a Hugging Face Llama folder whose logits and token ids are
the native model's, loaded by sinklab and by transformers; every run Llama cannot hold is refused."""

import argparse
import json
import os

import numpy as np
import pytest
import torch

import sinklab
from sinklab import cli
from sinklab.cli import export as export_cli
from sinklab.core.attention import AttentionSpec
from sinklab.core.errors import SinklabError
from sinklab.models.native import ModelConfig, Transformer
from sinklab.pretrain import PretrainConfig, export_llama, exported_from, load_trained, train_lm
from sinklab.pretrain import export as export_module

WORDS = "the king queen love death night day sword crown blood heart fair foul sweet sour honour".split()
TEXTS = [
    "To be, or not to be",
    "ça va? naïve façade, 水 ☃ 🐍 <|endoftext|> <bos>\n\t",
    "\x00\x7f" + "".join(map(chr, range(32, 600))),
]


def tiny(corpus, **kw):
    """A bytes run of a few steps at tiny dimensions (seconds on a CPU)."""
    base = dict(corpus=corpus, tokenizer="bytes", d_model=32, n_layers=2, n_heads=2, seq_len=32, batch=4, steps=3, warmup=1)
    base.update(eval_every=3, eval_batches=1, checkpoint_every=3, scan_tokens=16, scan_batch=2)
    return PretrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Eight small documents of pseudo-English, and a private cache for the module."""
    root = tmp_path_factory.mktemp("export")
    folder = root / "corpus"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        (folder / f"doc{i}.txt").write_text(" ".join(rng.choice(WORDS, size=1500)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SINKLAB_CACHE", str(root / "cache"))
        yield str(folder)


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "bytes"
    train_lm(tiny(corpus), out)
    return out


def export_command(*argv: str) -> int:
    """``sinklab export ...`` through the command's own parser (cli.COMMANDS lists it once registered)."""
    parser = argparse.ArgumentParser()
    export_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", *argv])
    with cli.quiet(True):
        return args.handler(args)


def byte_ids(text: str) -> torch.Tensor:
    return torch.tensor([list(text.encode("utf-8"))], dtype=torch.long)


def assert_same_logits(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


def interleaved(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """q or k rows in the interleaved-pairs rotary order (0, D/2, 1, D/2+1, ...) within each head."""
    d = weight.shape[0] // heads
    order = torch.arange(d).view(2, d // 2).t().reshape(-1)
    return weight.view(heads, d, -1)[:, order].reshape(weight.shape)


@torch.no_grad()
def test_exported_llama_computes_the_native_logits(run, tmp_path, capsys):
    """Loaded by sinklab and by transformers, the folder gives the native logits on byte ids (float32,
    1e-5 relative). The comparison can tell: Llama's usual eps 1e-6 instead of float32's 2**-23, and
    q/k rows in the interleaved rotary order, each fail it (mutations of the export tried as well:
    rms_norm_eps=1e-6, and the interleaved permutation applied in llama_weights; both fail here)."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "llama"
    assert export_command(str(run), str(folder)) == 0
    assert f"exported: {folder}" in capsys.readouterr().out
    native, cfg = load_trained(run)
    ids = byte_ids("To be, or not to be: that is the q")[:, : cfg.seq_len]
    want = native(ids)
    loaded = sinklab.load_model(str(folder))
    assert type(loaded.model).__name__ == "LlamaForCausalLM" and loaded.model.dtype == torch.float32
    assert_same_logits(loaded.model(ids).logits, want)
    plain = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    assert_same_logits(plain(ids).logits, want)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    mask = os.umask(0)
    os.umask(mask)
    assert {oct(p.stat().st_mode & 0o777) for p in [folder, *folder.iterdir()]} == {oct(0o777 & ~mask), oct(0o666 & ~mask)}
    config = json.loads((folder / "config.json").read_text())
    assert config["rms_norm_eps"] == 2**-23 and config["tie_word_embeddings"] and config["max_position_embeddings"] == 32
    assert exported_from(folder)["exported_from"] == str(run.resolve()) and exported_from(folder)["step"] == 3
    assert exported_from(folder)["pretrain_config"]["tokenizer"] == "bytes" and exported_from(run) is None

    wrong_eps = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, rms_norm_eps=1e-6).eval()
    with pytest.raises(AssertionError):
        assert_same_logits(wrong_eps(ids).logits, want)
    for layer in plain.model.layers:
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
            proj.weight.copy_(interleaved(proj.weight, native.cfg.n_heads))
    with pytest.raises(AssertionError):
        assert_same_logits(plain(ids).logits, want)


def test_the_tokenizer_gives_utf8_bytes_and_names_the_document_boundary(run, tmp_path):
    """ids are the UTF-8 bytes of any text (the special tokens' spellings too) and decode back; EOD
    (256) is EOS and, for a run without --bos, BOS; a --bos run's reserved id 257 is its BOS."""
    from transformers import AutoTokenizer

    folder = export_llama(run, tmp_path / "llama")
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    rng = np.random.default_rng(1)
    random_text = "".join(chr(c) for c in rng.integers(1, 0x2FFF, size=400) if not 0xD800 <= c < 0xE000)
    for text in [*TEXTS, random_text]:
        assert tok(text)["input_ids"] == list(text.encode("utf-8")) == tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(tok(text)["input_ids"]) == text
    assert (tok.eos_token_id, tok.bos_token_id, len(tok)) == (256, 256, 257)
    loaded = sinklab.load_model(str(folder))
    assert loaded.tokenizer.bos_token_id == loaded.model.config.bos_token_id == 256
    with_bos = export_module.byte_tokenizer(with_bos=True)
    assert (with_bos.eos_token_id, with_bos.bos_token_id, len(with_bos)) == (256, 257, 258)
    assert with_bos("<bos>x")["input_ids"] == list(b"<bos>x")


@torch.no_grad()
def test_biases_untied_head_and_theta_map_exactly_and_an_unknown_tensor_is_refused():
    """Parts pretraining does not use today (biases, an untied head, another theta, trained norm
    scales) map exactly too; a native tensor with no Llama place (a head gate) is refused."""
    arch = dict(d_model=32, n_layers=2, n_heads=2, residual=True, mlp=True, norm=True, rope=True, scale_scores=True)
    native = Transformer(ModelConfig(**arch, vocab_size=257, bias=True, tie_embeddings=False, rope_theta=500.0, max_seq_len=40))
    torch.manual_seed(0)
    for p in native.parameters():
        if p.ndim == 1:
            p.add_(0.3 * torch.randn_like(p))
    ids = torch.randint(257, (2, 40), generator=torch.Generator().manual_seed(1))
    hf = export_module.llama_model(native.eval(), eod=256, bos=None)
    assert hf.config.attention_bias and hf.config.mlp_bias and not hf.config.tie_word_embeddings
    assert_same_logits(hf(ids).logits, native(ids))
    gated = Transformer(ModelConfig(**arch, vocab_size=257, attention=AttentionSpec(gate=True)))
    with pytest.raises(SinklabError, match="head_out.gate.weight has no Llama counterpart"):
        export_module.llama_weights(gated)


REFUSED = {
    "the default tokenizer": (dict(tokenizer="default"), "pretrain with --tokenizer bytes to export"),
    "Bigram-Backcopy": (dict(corpus="bb", tokenizer="default"), "Bigram-Backcopy"),
    "relu attention": (dict(attention=AttentionSpec("relu")), "uses relu attention"),
    "softmax1 attention": (dict(attention=AttentionSpec("softmax1")), "uses softmax1 attention"),
    "a head gate": (dict(attention=AttentionSpec(gate=True)), "per-head extras gate"),
    "a head norm": (dict(attention=AttentionSpec(head_norm=True)), "per-head extras head_norm"),
    "sink tokens": (dict(sink_tokens=2), "2 learned sink tokens"),
    "learned positions": (dict(positions="learned"), "has learned positions"),
    "no positions": (dict(positions="none"), "has none positions"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_llama_cannot_express_is_refused_in_one_line(case):
    changes, says = REFUSED[case]
    cfg = PretrainConfig(**{**dict(tokenizer="bytes", corpus="shakespeare"), **changes})
    vocab = {"bb": 20, "bytes": 257}.get(cfg.corpus if cfg.corpus == "bb" else cfg.tokenizer, 300)
    with pytest.raises(SinklabError, match=says) as refused:
        export_module.check_exportable(cfg, cfg.model_config(vocab))
    assert "\n" not in str(refused.value)


def test_a_refused_run_and_a_taken_folder_write_nothing(corpus, run, tmp_path):
    """End to end: a trained run with sink tokens is refused and leaves no folder; an existing
    folder is kept unless --overwrite replaces an earlier export; a folder that is not one is never
    removed; a directory that is not a run is refused by load_trained's line."""
    sinks = tmp_path / "sinks"
    train_lm(tiny(corpus, n_layers=1, steps=1, warmup=0, sink_tokens=1, max_seq_len=33), sinks)
    with pytest.raises(SinklabError, match="1 learned sink tokens"):
        export_command(str(sinks), str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists() and not list(tmp_path.glob(".refused*"))
    folder = export_llama(run, tmp_path / "llama")
    with pytest.raises(SinklabError, match="exists already"):
        export_llama(run, folder)
    (folder / "marker").write_text("old")
    assert export_command(str(run), str(folder), "--overwrite") == 0 and not (folder / "marker").exists()
    (tmp_path / "mine").mkdir()
    with pytest.raises(SinklabError, match="not an earlier sinklab export"):
        export_llama(run, tmp_path / "mine", overwrite=True)
    with pytest.raises(SinklabError, match="is not a pretraining run"):
        export_llama(tmp_path / "mine", tmp_path / "other")


def test_sinklab_scan_reads_the_exported_folder(run, tmp_path, capsys):
    """A command that takes a model folder runs on the export (BOS auto: the EOD id first)."""
    folder = export_llama(run, tmp_path / "llama")
    out = tmp_path / "scan"
    code = cli.main(
        ["scan", str(folder), "--prompt", "the king and the queen " * 4, "--tokens", "24", "--out", str(out), "--quiet"]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["inputs"]["bos_token_id"] == 256
