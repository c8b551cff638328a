"""Mitigation pretraining: data, every variant, checkpoints, resume, DDP, compare, bad input."""

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import images_on, one_line_error

from sinklab import cli
from sinklab.core.atomic import read_jsonl
from sinklab.core.attention import ATTN_NORMS, EXTRA_NAMES, AttentionSpec
from sinklab.core.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from sinklab.core.configs import first_difference, from_dict, migrate
from sinklab.core.corpus import load_corpus, split_documents
from sinklab.core.errors import SinklabError
from sinklab.core.orthoadam import OrthoAdam
from sinklab.core.runs import config_record as record
from sinklab.models.native import Transformer
from sinklab.pretrain import PretrainConfig, architecture_of, compare, load_trained, results, train_lm
from sinklab.pretrain import train as pretrain
from sinklab.pretrain.sources import load_source
from sinklab.pretrain.tokens import load_token_data

WORDS = "the king queen love death night day sword crown blood heart fair foul sweet sour honour".split()


@pytest.fixture()
def corpus(tmp_path, monkeypatch):
    """Eight small documents of pseudo-English, and a private cache directory."""
    monkeypatch.setenv("SINKLAB_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "corpus"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        words = rng.choice(WORDS, size=1500)
        (folder / f"doc{i}.txt").write_text(" ".join(words))
    return str(folder)


def tiny(corpus, attn="softmax", **kw):
    """A small run of ``corpus``; the per-head extras (``gate=True``, ...) go to its AttentionSpec."""
    extras = {name: kw.pop(name) for name in EXTRA_NAMES if name in kw}
    base = dict(
        attention=AttentionSpec(attn, **extras),
        corpus=corpus,
        tokenizer="bytes",
        d_model=32,
        n_layers=2,
        n_heads=2,
        seq_len=32,
        batch=4,
        steps=12,
        warmup=2,
        eval_every=4,
        eval_batches=2,
        checkpoint_every=4,
        scan_tokens=16,
        scan_batch=2,
    )
    base.update(kw)
    return PretrainConfig(**base)


def test_split_is_by_document_without_leakage(corpus):
    docs = load_corpus(corpus)
    train, val = split_documents(docs, val_every=4)
    assert {d.name for d in train}.isdisjoint({d.name for d in val}) and len(train) + len(val) == len(docs)
    data = load_token_data(corpus, "bytes", val_every=4)
    assert data.meta["val_documents"] == [d.name for d in val]
    expected_val = b"".join(d.text.encode() + b"\x00" for d in val)  # 256 (end of document) shown as 0 here
    got = bytes(int(t) if t < 256 else 0 for t in data.val)
    assert got == expected_val
    assert data.val_bytes == sum(len(d.text.encode()) for d in val)


def test_compact_vocabulary_decodes_with_the_cached_tokenizer_copy(corpus, tokenizer, monkeypatch):
    """The default tokenizer path: ids are compacted, and decoding needs only the cache folder."""
    from sinklab.pretrain import tokens as lmdata

    monkeypatch.setattr(lmdata, "default_tokenizer", lambda: tokenizer)
    data = load_token_data(corpus, "default", val_every=4)
    assert data.vocab_size == len(data.source_ids) < len(tokenizer)
    assert (data.root / lmdata.TOKENIZER_DIR / "tokenizer.json").exists()
    monkeypatch.setattr(lmdata, "default_tokenizer", lambda: pytest.fail("decode must not need the model's tokenizer"))
    first_val = load_corpus(corpus)[2].text  # doc2 is the first validation document with val_every=4
    assert lmdata.decode(data, [int(t) for t in data.val[:50]]) == tokenizer.decode(
        tokenizer(first_val, add_special_tokens=False)["input_ids"][:50]
    )


@pytest.mark.parametrize(
    "variant", [{"attn": a} for a in ATTN_NORMS] + [{e: True} for e in EXTRA_NAMES] + [{"sink_tokens": 2}], ids=str
)
def test_every_variant_trains_with_finite_gradients(variant, corpus, tmp_path):
    cfg = tiny(corpus, **variant)
    data = load_token_data(corpus, "bytes")
    torch.manual_seed(0)
    model = Transformer(cfg.model_config(data.vocab_size))
    opt = pretrain.make_optimizer(model, cfg)
    losses = []
    for step in range(1, 9):
        loss = pretrain.lm_loss(model, pretrain.step_batch(data, cfg, step))
        opt.zero_grad()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_run_directory_contract(corpus, tmp_path):
    out = tmp_path / "run"
    summary = train_lm(tiny(corpus), out).summary
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [4, 8, 12]
    assert all({"step", "train_loss", "val_loss", "tokens_per_s", "val_bpb"} <= set(r) for r in rows)
    saved = json.loads((out / "summary.json").read_text())
    for key in ("attn", "gate", "head_norm", "final_val_loss", "tokens_per_s", "first_token_mass", "sink_rate"):
        assert key in saved
    assert len(saved["first_token_mass"]) == 2 and len(saved["first_token_mass"][0]) == 2
    assert set(saved["sink_rate"]) >= {"k", "eps", "value"}
    assert summary["final_val_loss"] == rows[-1]["val_loss"]
    assert saved["kind"] == "pretrain" and saved["schema_version"] >= 1
    shared = set(saved) & set(rows[-1])  # metrics.jsonl and summary.json: one name and one type per quantity
    assert {"first_token_mass_mean", "sink_rate_value"} <= shared
    assert all(type(saved[k]) is type(rows[-1][k]) for k in shared if saved[k] is not None and rows[-1][k] is not None), shared
    assert (out / "config.json").exists() and latest_checkpoint(out) is not None
    # 16 distinct words: a unigram model of the bytes is far better than uniform over 257 ids
    assert 1.0 < summary["unigram_val_loss"] < 0.75 * np.log(257)


def test_checkpoint_round_trip(corpus, tmp_path):
    cfg = tiny(corpus)
    torch.manual_seed(0)
    model = Transformer(cfg.model_config(257))
    opt = pretrain.make_optimizer(model, cfg)
    model(torch.randint(0, 257, (2, 8))).sum().backward()
    opt.step()
    path = save_checkpoint(tmp_path, 3, model, opt, {"note": "x"})
    torch.manual_seed(1)
    other = Transformer(cfg.model_config(257))
    other_opt = pretrain.make_optimizer(other, cfg)
    state = load_checkpoint(path, other, other_opt)
    assert state["step"] == 3 and state["note"] == "x"
    for a, b in zip(model.state_dict().values(), other.state_dict().values()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict()["state"], other_opt.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg_sq"], s2[i]["exp_avg_sq"]) for i in s1)


def killed_at_step_7(cfg, out, monkeypatch) -> None:
    """Train ``cfg`` into ``out`` and interrupt it at step 7, after its checkpoint at step 4."""
    original = pretrain.step_batch

    def dies_at_step_7(data, cfg, step):
        if step == 7:
            raise KeyboardInterrupt
        return original(data, cfg, step)

    monkeypatch.setattr(pretrain, "step_batch", dies_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        train_lm(cfg, out)
    monkeypatch.setattr(pretrain, "step_batch", original)


@pytest.mark.parametrize(
    "mitigations", [{}, {"optimizer": "orthoadam", "tweo": 0.01, "checkpoint_every": 2}], ids=["adamw", "orthoadam+tweo"]
)
def test_resumed_run_reproduces_the_uninterrupted_loss_curve(corpus, tmp_path, monkeypatch, mitigations):
    """OrthoAdam's rotations and moments travel in the checkpoint: a resumed run is the same run."""
    straight = tmp_path / "straight"
    train_lm(tiny(corpus, **mitigations), straight)
    killed = tmp_path / "killed"
    killed_at_step_7(tiny(corpus, **mitigations), killed, monkeypatch)
    train_lm(tiny(corpus, **mitigations), killed, resume=True)
    a, b = read_jsonl(straight / "metrics.jsonl"), read_jsonl(killed / "metrics.jsonl")
    assert [r["step"] for r in b] == [4, 8, 12]
    for ra, rb in zip(a, b):
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], abs=1e-6)
        assert ra["val_loss"] == pytest.approx(rb["val_loss"], abs=1e-6)
        assert ra.get("train_tweo") == pytest.approx(rb.get("train_tweo"), abs=1e-6)
    assert ("train_tweo" in a[0]) == bool(mitigations)


def test_tweo_adds_its_weighted_penalty_on_every_block_output(corpus):
    """The objective is LM + w * mean over blocks of mean((|A| / (tau + 1e-6))^p), A a block's
    output, recomputed here by running the blocks by hand."""
    cfg = tiny(corpus, tweo=0.5, tweo_tau=0.7, tweo_p=3.0)
    data = load_token_data(corpus, "bytes")
    torch.manual_seed(0)
    model = Transformer(cfg.model_config(data.vocab_size))
    batch = pretrain.step_batch(data, cfg, 1)
    loss, parts = pretrain.training_loss(model, model, batch, cfg)
    x, penalties = model.embed(batch[:, :-1]), []
    for block in model.blocks:
        x, _ = block(x, model.rotary, None)
        penalties.append((x.abs() / (0.7 + 1e-6)).pow(3.0).mean())
    expected = torch.stack(penalties).mean()
    assert parts["tweo"] == pytest.approx(expected.item(), rel=1e-6)
    assert parts["lm"] == pytest.approx(pretrain.lm_loss(model, batch).item(), rel=1e-6)
    assert loss.item() == pytest.approx(parts["lm"] + 0.5 * parts["tweo"], rel=1e-6)
    assert not model.hooks  # the collecting hook is gone
    params = [p for p in model.parameters() if p.requires_grad]
    total = torch.autograd.grad(pretrain.training_loss(model, model, batch, cfg)[0], params)
    lm = torch.autograd.grad(pretrain.lm_loss(model, batch), params)
    with pretrain.block_outputs(model) as outputs:
        pretrain.lm_loss(model, batch)
    tweo = torch.autograd.grad(pretrain.tweo_penalty(outputs, 0.7, 3.0), params, allow_unused=True)
    tweo = [torch.zeros_like(p) if b is None else b for p, b in zip(params, tweo)]  # the output layer's final norm
    for t, a, b in zip(total, lm, tweo):  # the penalty reaches the gradient, at its weight
        torch.testing.assert_close(t, a + 0.5 * b, atol=1e-6, rtol=1e-5)
    assert max(b.abs().max() for b in tweo) > 0


def test_the_reported_training_loss_is_the_language_models_alone_and_the_optimizer_is_the_configs(corpus, tmp_path):
    """With TWEO on, ``train_loss`` is the LM loss (runs compare) and ``train_tweo`` the penalty,
    both of step 1's initial model here; ``--optimizer orthoadam`` reaches the optimizer with the
    run's seed."""
    cfg = tiny(corpus, tweo=0.5, steps=2, warmup=1, eval_every=1, checkpoint_every=2, optimizer="orthoadam", seed=3)
    train_lm(cfg, tmp_path / "run")
    data = load_token_data(corpus, "bytes")
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model_config(data.vocab_size))
    _, parts = pretrain.training_loss(model, model, pretrain.step_batch(data, cfg, 1), cfg)
    first = read_jsonl(tmp_path / "run" / "metrics.jsonl")[0]
    assert first["train_loss"] == pytest.approx(parts["lm"], rel=1e-5)
    assert first["train_tweo"] == pytest.approx(parts["tweo"], rel=1e-5)
    opt = pretrain.make_optimizer(model, cfg)
    assert isinstance(opt, OrthoAdam) and opt.seed == 3
    assert isinstance(pretrain.make_optimizer(model, tiny(corpus)), torch.optim.AdamW)


def test_weight_decay_reaches_matrices_only_the_value_gates_bias_included(corpus):
    """The value gate's bias is (heads, 1, head_dim): by shape it looked like a matrix and was
    decayed toward a half-open gate. Mutation caught: the groups split by ndim alone."""
    cfg = tiny(corpus, value_gate=True, gate=True, head_norm=True)
    model = Transformer(cfg.model_config(load_token_data(corpus, "bytes").vocab_size))
    decayed, kept = pretrain.make_optimizer(model, cfg).param_groups
    assert decayed["weight_decay"] == cfg.weight_decay and kept["weight_decay"] == 0.0
    names = {id(p): name for name, p in model.named_parameters()}
    assert {names[id(p)] for p in kept["params"]} == {n for n, p in model.named_parameters() if p.ndim < 2 or n.endswith("bias")}
    assert any(names[id(p)].endswith("value_gate.bias") for p in kept["params"])
    assert all(p.ndim >= 2 and not names[id(p)].endswith("bias") for p in decayed["params"])


def test_every_training_mitigation_is_in_the_variant_name_and_bad_settings_are_refused(corpus):
    names = {
        tiny(corpus, **kw).variant
        for kw in (
            {},
            {"optimizer": "orthoadam"},
            {"tweo": 0.01},
            {"tweo": 0.1},
            {"tweo": 0.01, "tweo_p": 2.0},
            {"tweo": 0.0100000001},
            {"value_gate": True},
            {"vga": True, "tweo": 0.01},
            {"attn": "softpick", "tweo": 0.01},
        )
    }
    assert names == {
        "softmax",
        "softmax+orthoadam",
        "softmax+tweo",
        "softmax+tweo_w0.1",
        "softmax+tweo_p2",
        "softmax+tweo_w0.0100000001",
        "softmax+value_gate",
        "softmax+vga+tweo",
        "softpick+tweo",
    }
    for kw, message in (
        ({"optimizer": "sgd"}, "--optimizer must be one of adamw, orthoadam"),
        ({"tweo": -1.0}, "--tweo is a loss weight"),
        ({"tweo_p": 2.0}, "--tweo-p is read only with --tweo"),
        ({"bb_triggers": 5}, "--bb-triggers is read only with --corpus bb"),  # on text (train_lm, sweep --set)
        ({"tweo": 0.01, "tweo_tau": 0.0}, "must be > 0"),
        ({"tweo": math.inf}, "finite"),
        ({"tweo": 0.01, "tweo_p": math.inf}, "finite"),
    ):
        with pytest.raises(SinklabError, match=message):
            tiny(corpus, **kw)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--corpus", "bb", "--tweo-tau", "3"], "--tweo-tau is read only with --tweo"),  # its default, given
        (["--bb-triggers", "3"], "--bb-triggers is read only with --corpus bb"),  # on text: ignored before
        (["--corpus", "bb", "--bb-triggers", "0"], "--bb-triggers must lie in [1, 61]"),  # refused after claiming --out before
        (["--corpus", "bb", "--tokenizer", "bytes"], "has its own character vocabulary"),
        (["--corpus", "/nowhere/corpus.txt"], "no such corpus file or folder: /nowhere/corpus.txt"),
        (["--corpus", "{empty}"], "holds no text files"),
        (["sweep", "--corpus", "bb", "--set", "bb_triggers=0", "--variants", "softmax"], "--bb-triggers must lie in [1, 61]"),
        (["sweep", "--corpus", "bb", "--set", "seq_len=3", "--variants", "softmax"], "--tokens must be at least 4"),
    ],
)
def test_the_command_line_refuses_what_the_run_would_not_read_before_claiming(flags, needle, tmp_path, capsys):
    """The config alone cannot tell ``--tweo-tau 3`` (its default) from no flag; the command line
    can. The data's own refusals come before the run directory is claimed (a preflight), also in a
    sweep (which left run.json, config.json and a launcher log)."""
    out, empty = tmp_path / "run", tmp_path / "empty"
    empty.mkdir()
    command = ["pretrain"] if flags[0] != "sweep" else []
    assert cli.main([*command, *(f.format(empty=empty) for f in flags), "--out", str(out)]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()


@pytest.mark.integration
@pytest.mark.parametrize("mitigation", [[], ["--optimizer", "orthoadam", "--tweo", "0.1"]], ids=["adamw", "orthoadam+tweo"])
def test_two_process_ddp_matches_one_process(corpus, tmp_path, mitigation):
    """Each rank's rotation is the same seeded one and TWEO's penalty is averaged over ranks as the
    loss is, so two processes train as one does."""
    common = [
        "pretrain",
        *mitigation,
        "--corpus",
        corpus,
        "--tokenizer",
        "bytes",
        "--d-model",
        "32",
        "--n-layers",
        "2",
        "--n-heads",
        "2",
        "--seq-len",
        "32",
        "--batch",
        "8",
        "--steps",
        "6",
        "--warmup",
        "1",
        "--eval-every",
        "3",
        "--eval-batches",
        "2",
        "--checkpoint-every",
        "3",
        "--device",
        "cpu",
    ]  # gloo on CPU, whatever the machine has
    single = tmp_path / "single"
    assert cli.main([*common, "--out", str(single)]) == 0
    double = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "sinklab",
        *common,
        "--out",
        str(double),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = read_jsonl(single / "metrics.jsonl"), read_jsonl(double / "metrics.jsonl")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [3, 6]
    for ra, rb in zip(a, b):
        assert ra["train_loss"] == pytest.approx(rb["train_loss"], abs=1e-4)
        assert ra["val_loss"] == pytest.approx(rb["val_loss"], abs=1e-4)


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_checkpoint(corpus, tmp_path, monkeypatch):
    original = pretrain.lm_loss
    calls = {"n": 0}

    def goes_nan(model, batch):
        calls["n"] += 1
        loss = original(model, batch)
        return loss * float("nan") if calls["n"] > 6 and model.training else loss

    monkeypatch.setattr(pretrain, "lm_loss", goes_nan)
    out = tmp_path / "run"
    with pytest.raises(SinklabError, match="the loss is nan at step"):
        train_lm(tiny(corpus), out)
    assert latest_checkpoint(out).name == "ckpt-0000004"


def test_bad_input(corpus, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.txt").write_text("   ")
    with pytest.raises(SinklabError, match="empty"):
        train_lm(tiny(str(empty)), tmp_path / "r1")
    with pytest.raises(SinklabError, match="no such corpus"):
        train_lm(tiny(str(tmp_path / "missing")), tmp_path / "r2")
    small = tmp_path / "small"
    small.mkdir()
    for i in range(3):
        (small / f"{i}.txt").write_text("tiny text")
    with pytest.raises(SinklabError, match="smaller than one batch"):
        train_lm(tiny(str(small)), tmp_path / "r3")
    with pytest.raises(SinklabError, match="exceeds the model's maximum"):
        tiny(corpus, seq_len=64, max_seq_len=32)
    for field, value in [
        ("min_lr_ratio", 1.5),
        ("grad_clip", -1.0),
        ("adam_beta2", 1.0),
        ("lr", -1.0),
        ("lr", 0.0),
        ("weight_decay", -0.1),
    ]:
        with pytest.raises(SinklabError, match=f"--{field.replace('_', '-')} must"):
            tiny(corpus, **{field: value})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SinklabError, match="sees no GPU"):
        tiny(corpus, device="cuda")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SinklabError, match="not writable"):
        train_lm(tiny(corpus), blocker / "sub")


def test_resume_refuses_an_incompatible_or_corrupt_checkpoint(corpus, tmp_path):
    """Mutation tried: claim_run_dir not comparing an unfinished run's config (the d_model run
    resumes from a checkpoint of another shape: "does not fit")."""
    out = tmp_path / "run"
    finished = train_lm(tiny(corpus, steps=4), out)
    (out / "summary.json").unlink()  # as a run killed after its last checkpoint
    with pytest.raises(SinklabError, match=r"another configuration \(d_model: 32 there, 64 now\)"):
        train_lm(tiny(corpus, steps=4, d_model=64), out, resume=True)
    (latest_checkpoint(out) / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(SinklabError, match="corrupt"):
        train_lm(tiny(corpus, steps=4), out, resume=True)
    assert train_lm(tiny(corpus, steps=4), out, overwrite=True).summary["final_val_loss"] == finished.summary["final_val_loss"]


def test_compare_table_and_plots(corpus, tmp_path, capsys):
    runs = []
    for attn in ("softmax", "softmax1"):
        out = tmp_path / attn
        train_lm(tiny(corpus, attn=attn, steps=8), out)
        runs.append(str(out))
    with images_on():  # the comparison's PNGs are checked, not the runs'
        assert cli.main(["compare", *runs, "--out", str(tmp_path / "cmp")]) == 0
    result = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert result["kind"] == "pretrain-compare" and {r["variant"] for r in result["rows"]} == {"softmax", "softmax1"}
    assert all(r["steps_to_target"] is not None for r in result["rows"])  # the default target is the worst final loss
    for key in ("value_state_drain_max", "quant_w8a8_tensor_static"):  # issue 52's figures reach the row and the means
        assert all(r[key] is not None for r in result["rows"]) and all(key in v for v in result["by_variant"]), key
    assert "value_state_drain_max" in compare.PAIRED_KEYS and "quant_w8a8_tensor_static" in compare.PAIRED_KEYS
    files = json.loads((tmp_path / "cmp" / "run.json").read_text())["files"]
    assert "val_loss.png" in files and all((tmp_path / "cmp" / f).exists() for f in files)
    assert "final val loss" in capsys.readouterr().out
    with pytest.raises(SinklabError, match="not a pretraining run"):
        results.load_run(str(tmp_path))


def test_the_by_layer_figure_has_a_panel_per_figure_some_run_holds_one_colour_per_run():
    """A layers x heads figure is drawn as its mean over heads; a run without a figure (a run from
    before it was recorded) leaves that panel to the others; an unfinished run (no summary) draws
    nothing and keeps its colour, so every run has the colour its curves have on the same page."""
    from sinklab.pretrain import plots

    old = {"first_token_mass_by_layer": [0.2, 0.9]}
    new = {**old, "value_state_drain": [1.0, 0.1], "attention_zero_share": [[0.0, 0.5], [1.0, 0.0]]}
    fig = plots.by_layer_figure({"old": old, "unfinished": None, "new": new})
    curves = plots._traces({"old": [], "unfinished": [], "new": []}, "val_loss")
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [plots.LAYER_PANELS[k] for k in ("first_token_mass_by_layer", "value_state_drain", "attention_zero_share")]
    assert plots.by_layer_figure({"new": {**new, "kurtosis": [3.0, 900.0]}}).layout.yaxis2.type == "log"  # kurtosis: 2nd panel
    by_panel = {}
    for trace in fig.data:
        by_panel.setdefault(trace.xaxis, []).append(trace)
    assert [[t.name for t in by_panel[axis]] for axis in ("x", "x2", "x3")] == [["old", "new"], ["new"], ["new"]]
    assert list(by_panel["x3"][0].y) == [0.25, 0.5]
    assert by_panel["x"][1].line.color == by_panel["x2"][0].line.color == curves[2].line.color != by_panel["x"][0].line.color


def test_a_torn_last_line_is_skipped_with_a_warning_and_a_damaged_one_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"st')
    with pytest.warns(UserWarning, match="torn last line"):
        assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(SinklabError, match="line 2, is not valid JSON"):
        read_jsonl(path)


def test_paired_comparison_pairs_seeds_and_flips_signs_exactly():
    """Hand-made rows: the differences are paired by seed (a seed only one variant ran is left
    out), and the sign-flip p-value counts the 2^n patterns. Mutations: pairing by row order
    instead of seed, or a one-sided count (f >= observed without abs), each change a number here."""
    from sinklab.pretrain.compare import paired_comparison

    base = {0: 0.9, 1: 0.5, 2: 0.7, 3: 0.2, 9: 0.0}
    rows = [{"variant": "softmax", "seed": s, "first_token_mass_mean": v} for s, v in base.items()]
    rows += [
        {"variant": "gate", "seed": s, "first_token_mass_mean": base[s] - d} for s, d in [(3, 0.1), (2, 0.3), (1, 0.2), (0, 0.4)]
    ]
    rows += [{"variant": "gate", "seed": 5, "first_token_mass_mean": 0.0}]
    (entry,) = paired_comparison(rows, keys=("first_token_mass_mean",))
    stats = entry["first_token_mass_mean"]
    assert entry["seeds"] == [0, 1, 2, 3]
    assert stats["diffs"] == pytest.approx([-0.4, -0.2, -0.3, -0.1])
    assert stats["mean"] == pytest.approx(-0.25) and stats["sd"] == pytest.approx(math.sqrt(0.05 / 3))
    assert stats["p_sign_flip"] == pytest.approx(2 / 16)  # only all-minus and all-plus reach |sum| = 1.0
    assert stats["t"] == pytest.approx(-0.25 / (math.sqrt(0.05 / 3) / 2))


def test_optimiser_knobs_reach_the_optimiser(corpus, tmp_path, monkeypatch):
    """``--grad-clip 0`` must skip clipping (clip_grad_norm_ with max_norm 0 would zero every
    gradient) and ``--adam-beta2`` must reach AdamW. Mutations: calling clip_grad_norm_
    unconditionally, or a hard-coded beta2 of 0.95, each fail an assertion."""
    clipped = []
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, norm: clipped.append(norm))
    train_lm(tiny(corpus, steps=2, warmup=0, grad_clip=0.0), tmp_path / "noclip")
    assert clipped == []
    train_lm(tiny(corpus, steps=2, warmup=0, grad_clip=0.5), tmp_path / "clip")
    assert clipped == [0.5, 0.5]
    model = Transformer(tiny(corpus).model_config(64))
    assert pretrain.make_optimizer(model, tiny(corpus, adam_beta2=0.999)).param_groups[0]["betas"] == (0.9, 0.999)


def test_positions_choose_the_model_encoding_and_older_checkpoints_mean_rope(corpus, tmp_path):
    """``--positions`` picks rotary, learned or no position information (only rotary needs an even
    head dimension); a run written before the option existed (config version 0) is the same run
    as today's rope one and refuses another encoding (one from before --adam-beta2 means 0.95), and
    no missing key beyond BEFORE_KEY_EXISTED is filled in. Mutations caught: the encodings mapped
    wrongly; defaults filled for every missing key (an empty saved config then passed);
    adam_beta2 dropped from BEFORE_KEY_EXISTED (the older run then differs)."""
    for positions, rope, learned in [("rope", True, False), ("learned", False, True), ("none", False, False)]:
        model_cfg = tiny(corpus, positions=positions).model_config(64)
        assert (model_cfg.rope, model_cfg.learned_positions) == (rope, learned)
    with pytest.raises(SinklabError, match="--positions must be one of rope, learned, none"):
        tiny(corpus, positions="alibi")
    with pytest.raises(SinklabError, match="even"):
        tiny(corpus, d_model=30, n_heads=10)  # head dimension 3: fine without rotary embeddings
    tiny(corpus, d_model=30, n_heads=10, positions="learned")
    older = {k: v for k, v in record(tiny(corpus)).items() if k not in ("positions", "adam_beta2", "config_version")}
    assert first_difference(migrate(PretrainConfig, older), record(tiny(corpus))) is None
    assert (
        first_difference(migrate(PretrainConfig, older), record(tiny(corpus, positions="learned")))
        == "positions: 'rope' there, 'learned' now"
    )
    with pytest.raises(SinklabError, match="lacks .*d_model"):  # only the new keys get a default
        from_dict(PretrainConfig, migrate(PretrainConfig, {"positions": "rope"}), "config.json")


def test_positions_flag_reaches_the_trained_model(tmp_path):
    """``sinklab pretrain --positions learned`` trains a model with learned positions and no rotary
    embeddings. Mutation caught: the CLI not passing --positions on (the run is then rope)."""
    out = tmp_path / "run"
    assert (
        cli.main(
            [
                "pretrain",
                "--corpus",
                "bb",
                "--positions",
                "learned",
                "--d-model",
                "16",
                "--n-layers",
                "1",
                "--n-heads",
                "2",
                "--tokens",
                "8",
                "--batch",
                "2",
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--eval-batches",
                "1",
                "--checkpoint-every",
                "2",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    config, architecture = json.loads((out / "config.json").read_text()), architecture_of(out)
    assert config["positions"] == "learned" and architecture["learned_positions"] and not architecture["rope"]


def test_load_trained_gives_back_the_model_that_was_scored(tmp_path):
    """``load_trained`` rebuilds a run from its directory alone: the configuration it trained with
    (learned positions, not the rope default) and a model whose loss on the run's own validation
    batches is the last one metrics.jsonl recorded. Mutations caught: the checkpoint not loaded
    (a fresh model), the architecture re-derived with rotary positions, a saved key dropped."""
    out = tmp_path / "run"
    cli.main(
        [
            "pretrain",
            "--corpus",
            "bb",
            "--positions",
            "learned",
            "--d-model",
            "16",
            "--n-layers",
            "1",
            "--n-heads",
            "2",
            "--tokens",
            "8",
            "--batch",
            "2",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--eval-batches",
            "1",
            "--checkpoint-every",
            "2",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    model, cfg = load_trained(out)
    assert not model.training and cfg.positions == "learned" and model.positions is not None
    saved = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in record(cfg).items() if k != "device"} == {k: saved[k] for k in record(cfg) if k != "device"}
    data = load_source(cfg.corpus, cfg.tokenizer, cfg.bos, cfg.bb_triggers)
    recorded = read_jsonl(out / "metrics.jsonl")[-1]
    assert recorded["step"] == cfg.steps
    assert pretrain.validation_loss(model, pretrain.validation_batches(data, cfg)) == pytest.approx(
        recorded["val_loss"], rel=1e-6
    )
    with pytest.raises(SinklabError, match="is not a pretraining run"):
        load_trained(tmp_path)
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "config.json").write_text((out / "config.json").read_text())
    with pytest.raises(SinklabError, match="holds no checkpoint yet"):
        load_trained(tmp_path / "fresh")


def test_load_trained_refuses_what_it_cannot_know_and_says_when_a_run_stopped_early(tmp_path):
    """An older run (config version 0: config.json from before ``--positions`` and
    ``--adam-beta2``, holding its ``out`` and the architecture, which lacks ``learned_positions``)
    loads as it trained; a config.json lacking any other setting, or an architecture lacking one,
    is refused in one line instead of taking today's default; a run whose last checkpoint is short
    of its steps loads with a warning naming the step, and the model is the one scored at that
    step; a device this machine lacks is one line. Mutations caught: the missing-key check removed
    (``lr`` then silently became the corpus default), adam_beta2 dropped from BEFORE_KEY_EXISTED
    (the older run refused), ModelConfig without its version-0 migration (learned_positions: the
    older run refused; this default was filled outside the migrations before), the warning
    removed, the device not resolved first (torch's RuntimeError for "gpu"), the unknown model key
    check removed (a TypeError)."""
    out = tmp_path / "run"
    cli.main(
        [
            "pretrain",
            "--corpus",
            "bb",
            "--d-model",
            "16",
            "--n-layers",
            "1",
            "--n-heads",
            "2",
            "--tokens",
            "8",
            "--batch",
            "2",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--eval-batches",
            "1",
            "--checkpoint-every",
            "2",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    rows = {row["step"]: row["val_loss"] for row in read_jsonl(out / "metrics.jsonl")}

    def scored(model, cfg):
        return pretrain.validation_loss(
            model, pretrain.validation_batches(load_source(cfg.corpus, cfg.tokenizer, cfg.bos, cfg.bb_triggers), cfg)
        )

    def rewritten(name, edit, architecture_in_config=False):
        shutil.copytree(out, tmp_path / name)
        config, info = json.loads((out / "config.json").read_text()), json.loads((out / "run.json").read_text())
        if architecture_in_config:  # config version 0 kept the architecture there (unversioned), and its run directory
            config.pop("config_version")
            config.update(model=info["model"].pop("architecture"), out=str(out))
            config["model"].pop("config_version")
        edit(config, config.get("model") or info["model"]["architecture"])
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        (tmp_path / name / "run.json").write_text(json.dumps(info))
        return tmp_path / name

    older = rewritten(
        "older", lambda c, a: [c.pop("positions"), c.pop("adam_beta2"), a.pop("learned_positions")], architecture_in_config=True
    )
    model, cfg = load_trained(older)
    assert (cfg.positions, cfg.adam_beta2, model.cfg.rope) == ("rope", 0.95, True)
    assert scored(model, cfg) == pytest.approx(rows[4], rel=1e-6)
    with pytest.raises(SinklabError, match="config.json lacks lr: what made the run is unknown"):
        load_trained(rewritten("no-lr", lambda c, a: c.pop("lr")))
    with pytest.raises(SinklabError, match="has alibi, which this sinklab's ModelConfig does not know"):
        load_trained(rewritten("newer", lambda c, a: a.update(alibi=True)))
    with pytest.raises(SinklabError, match="lacks rope"):
        load_trained(rewritten("no-rope", lambda c, a: a.pop("rope")))
    (out / "latest").write_text("ckpt-0000002")  # as a run killed after its step-2 checkpoint
    with pytest.warns(UserWarning, match="stopped at step 2 of 4"):
        model, cfg = load_trained(out)
    assert scored(model, cfg) == pytest.approx(rows[2], rel=1e-6)
    with pytest.raises(SinklabError, match="unknown device 'gpu'"):
        load_trained(out, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(SinklabError, match="asks for CUDA"):
            load_trained(out, device="cuda")


def test_the_sweep_trains_every_training_mitigation_and_the_named_pairs_once():
    """The sweep's variants: every normalisation, each extra alone, OrthoAdam and TWEO alone, the
    three pairs, and (bb) one sink token; no two runs of a seed share a name, and what the sweep
    varies cannot be set for every run."""
    from sinklab.core.attention import ATTN_NORMS
    from sinklab.pretrain import SweepConfig
    from sinklab.pretrain.sweep import parse_setting

    names = [c.variant for c in SweepConfig(corpus="bb", seeds=(0,)).runs()]
    assert len(names) == len(set(names)) == len(ATTN_NORMS) + len(EXTRA_NAMES) + 5 + 1
    assert {"softmax+orthoadam", "softmax+tweo", "softmax1+orthoadam", "softmax+gate+head_norm", "softpick+tweo"} <= set(names)
    assert "softmax+value_gate" in names and "softpick" in names and "softmax+1sink" in names
    for setting in ("optimizer=orthoadam", "tweo=0.1", "tweo_p=2"):
        with pytest.raises(SinklabError, match="expected KEY=VALUE"):
            parse_setting(setting)
