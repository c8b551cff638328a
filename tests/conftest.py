"""Shared fixtures: tiny tokenizers and tiny random Hugging Face models saved as local folders."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# PNG figures only where a test asks for them (``with_images``, or ``images_on()`` in a shared
# fixture): each costs about 0.2 s a figure and 2 s a process's browser start, and the same plots
# are on every report page the tests read. SINKLAB_IMAGES=on runs the whole suite with them.
os.environ.setdefault("SINKLAB_IMAGES", "off")
# Under pytest-xdist (``make test`` runs two workers, one per core) each worker's torch takes one
# thread, as do the processes it starts: two two-thread workers on two cores spin-wait on each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

SAMPLE_TEXT = (
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings "
    "and arrows of outrageous fortune, or to take arms against a sea of troubles and by opposing end them. "
    "Now is the winter of our discontent made glorious summer by this sun of York. "
) * 4


@contextmanager
def images_on():
    """PNG figures written inside this block (the suite runs with SINKLAB_IMAGES=off)."""
    saved = os.environ.pop("SINKLAB_IMAGES", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["SINKLAB_IMAGES"] = saved


@pytest.fixture
def with_images():
    """A test that checks the PNG figures a run writes."""
    with images_on():
        yield


def make_tokenizer():
    """A small byte-level BPE tokenizer (about 300 tokens) with a BOS token, trained in memory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<bos>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([SAMPLE_TEXT], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>")


def tiny_config(arch: str, vocab_size: int, positions: int = 128):
    """A tiny random config of ``arch``: every architecture of the layout table, and gpt-oss, trained
    (as its config says) on ``positions`` positions.

    Sliding windows are shorter than the test inputs, so that the mask has to carry them."""
    import transformers as t

    common = dict(vocab_size=vocab_size, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    decoder = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=positions,
        **common,
    )
    gqa = dict(decoder, num_key_value_heads=2)
    configs = {
        "llama": lambda: t.LlamaConfig(**{**gqa, "num_hidden_layers": 3}),
        "mistral": lambda: t.MistralConfig(**gqa, sliding_window=8),
        "qwen2": lambda: t.Qwen2Config(**decoder, num_key_value_heads=4),
        "qwen3": lambda: t.Qwen3Config(**gqa, head_dim=8),
        "gemma": lambda: t.GemmaConfig(**gqa, head_dim=8),
        "gemma2": lambda: t.Gemma2Config(**gqa, head_dim=8, sliding_window=8, attn_logit_softcapping=5.0),
        "gemma3": lambda: t.Gemma3TextConfig(
            **gqa,
            head_dim=8,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
            },
        ),
        "phi": lambda: t.PhiConfig(**decoder),
        "gpt2": lambda: t.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=positions, **common),
        "gpt_neox": lambda: t.GPTNeoXConfig(**decoder),
        "opt": lambda: t.OPTConfig(
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            max_position_embeddings=positions,
            word_embed_proj_dim=32,
            **common,
        ),
        "gpt_oss": lambda: t.GptOssConfig(
            **{**gqa, "intermediate_size": 32}, head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=8
        ),
    }
    if arch not in configs:
        raise ValueError(arch)
    return configs[arch]()


#: One tiny config per architecture sinklab's layout table knows, plus gpt-oss (learned sink logits).
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi", "gpt2", "gpt_neox", "opt", "gpt_oss")


@pytest.fixture(scope="session")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A factory: the folder of a saved tiny random model of the given architecture (and number of
    positions: a run that reads more than the default 128, as ``sinklab compress`` does, is refused).

    The first test to ask for an architecture builds it inside its own body, so saving prints
    nothing (transformers' "Writing model shards" bar would land in that test's captured stderr
    and make its output depend on the order the tests run in)."""
    from transformers import AutoModelForCausalLM

    from sinklab.cli import quiet

    made = {}

    def make(arch: str, positions: int = 128):
        if (arch, positions) not in made:
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(tiny_config(arch, len(tokenizer), positions))
            path = tmp_path_factory.mktemp(f"tiny-{arch}")
            with quiet(True):
                model.save_pretrained(path)
            tokenizer.save_pretrained(path)
            made[arch, positions] = path
        return made[arch, positions]

    return make


@pytest.fixture(scope="session")
def default_model():
    """The real default model (SmolLM2-135M-Instruct), dequantised once and cached."""
    from sinklab.models.hf import load_model

    return load_model(None)


#: The folders :func:`built_once` built in this process (the schema check below reads them too).
_BUILT: list = []


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder ``name``, filled by ``build(folder)`` once per test session: under pytest-xdist by
    the first worker to ask, while the others wait for it and then read it. For session fixtures
    that take seconds to build and that tests only read (a worker's own fixture would be built by
    both workers)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, which holds each worker's own
    path, built = root / name, root / f"{name}.built"
    with FileLock(f"{path}.lock"):
        if not built.exists():
            shutil.rmtree(path, ignore_errors=True)  # a build that failed in another worker
            path.mkdir()
            build(path)
            built.touch()
            _BUILT.append(path)
    return path


#: A one-layer trigger learning rate at which seeds converge in about 400 steps instead of the
#: paper's 1e-3 and about 900: the same stopping rule, at different steps per seed, for less than half the steps.
CONVERGES_FAST = 3e-3


def seeds_of(base, seeds) -> list:
    """``base`` (a TriggerConfig) once per seed."""
    from dataclasses import replace

    return [replace(base, seed=s) for s in seeds]


@pytest.fixture(scope="session")
def trigger_pair(tmp_path_factory):
    """A trigger lab holding the default one-layer softmax and ReLU models (seed 0), trained once
    for every test that reads them: (its folder, its summary)."""
    from sinklab.core.attention import AttentionSpec
    from sinklab.trigger import TriggerConfig, run_lab

    def train(path):
        run_lab([TriggerConfig(attention=AttentionSpec(attn)) for attn in ("softmax", "relu")], path, workers=1)

    path = built_once(tmp_path_factory, "trigger-pair", train)
    return path, json.loads((path / "summary.json").read_text())


@pytest.fixture(scope="session")
def stream_run(tmp_path_factory, tiny_model_dir):
    """One ``sinklab stream`` run of the tiny Llama (every policy, the ablation, a chunked one-pass
    check), shared by the command's contract test and its report page test."""
    from sinklab import cli

    def stream(path):
        corpus = path / "text.txt"
        corpus.write_text("To be, or not to be, that is the question. " * 60)
        with images_on():  # its contract test checks the PNGs
            code = cli.main(
                [
                    "stream",
                    str(tiny_model_dir("llama")),
                    "--corpus",
                    str(corpus),
                    "--tokens",
                    "80",
                    "--sinks",
                    "2",
                    "--window",
                    "14",
                    "--recompute-every",
                    "10",
                    "--chunk",
                    "40",
                    "--latency-steps",
                    "2",
                    "--ablation",
                    "0,1",
                    "--out",
                    str(path / "run"),
                ]
            )
        assert code == 0

    return built_once(tmp_path_factory, "stream", stream) / "run"


BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@contextmanager
def benchmark_module(name: str):
    """A script of benchmarks/ imported as a module (importing benchmarks/common.py checks that
    the tree is clean; nothing is recorded by the tests, so that check is waived), then forgotten."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SINKLAB_BENCH_ALLOW_DIRTY", "1")
    mp.syspath_prepend(str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        mp.undo()
        sys.modules.pop(name, None)


def numbers_close(value, rel: float = 1e-5):
    """``value`` with every float replaced by ``pytest.approx`` (for ``==`` against another run's
    summary): a job in another process may sum in another order (torch's threads, its kernels'
    blocking) and differ in the last digits; everything else must be equal."""
    if isinstance(value, dict):
        return {k: numbers_close(v, rel) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers_close(v, rel) for v in value]
    return pytest.approx(value, rel=rel) if isinstance(value, float) else value


def one_line_error(capsys, *needles) -> str:
    """The one ``sinklab ...`` line on stderr (progress bars of model loading may precede it)."""
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("sinklab ")]
    assert "Traceback" not in err and len(ours) == 1, err
    for needle in needles:
        assert needle in ours[0]
    return ours[0]


@pytest.fixture(scope="session", autouse=True)
def every_summary_matches_its_schema(tmp_path_factory):
    """After the suite: every summary.json the pipeline wrote in this session (a run directory whose
    run.json says finished, written after its summary) validates against its kind's JSON schema
    (sinklab/schemas). Summaries a test changed afterwards (damaged on purpose) are left out."""
    yield
    from sinklab.core.errors import SinklabError
    from sinklab.core.schemas import validate

    checked, broken = 0, []
    for summary in (found for root in (tmp_path_factory.getbasetemp(), *_BUILT) for found in root.rglob("summary.json")):
        info = summary.parent / "run.json"
        if (
            not info.exists()
            or info.stat().st_mtime_ns < summary.stat().st_mtime_ns
            or '"status": "finished"' not in info.read_text()
        ):
            continue
        checked += 1
        try:
            validate(json.loads(summary.read_text()))
        except (SinklabError, ValueError) as exc:
            broken.append(f"{summary}: {exc}")
    assert not broken, f"{len(broken)} of {checked} summaries break their schema:\n" + "\n".join(broken[:10])


#: Choice sets whose counts (2, 4, 3) and lengths (1 to 4 characters) vary over a task's examples
#: (``write_task(..., choices=VARIED_CHOICES)``, gold "A"): where the chance level, lm-eval's acc
#: against acc_norm (which divides a choice's log-likelihood by its length) and the rotations per
#: example can differ. Every set holds a choice longer than "A".
VARIED_CHOICES = (("A", "BB"), ("A", "BBBB", "C", "DD"), ("A", "CCC", "B"))


def write_task(path, gold: str = "A", n: int = 24, choices=("A", "B"), **fields):
    """A BIG-bench multiple-choice task file: ``n`` distinct examples, ``choices`` (single
    characters, one token each), ``gold`` correct. ``choices`` may instead be a sequence of choice
    tuples (such as :data:`VARIED_CHOICES`), example ``i`` taking the ``i % len(choices)``-th, each
    holding ``gold``: tasks whose examples differ in their number of choices and their lengths."""
    words = ["tree", "wind", "stone", "river", "light", "field", "cloud", "sea"]
    sets = [tuple(choices)] if isinstance(choices[0], str) else [tuple(c) for c in choices]
    assert all(gold in s for s in sets), f"every choice set must hold the correct choice {gold!r}"
    examples = [
        {
            "input": " ".join(words[(i + j) % len(words)] for j in range(2 + i % 5)) + f" {i}",
            "target_scores": {c: int(c == gold) for c in sets[i % len(sets)]},
        }
        for i in range(n)
    ]
    data = {
        "name": path.parent.name,
        "examples": examples,
        "example_output_prefix": "\nAnswer:",
        "append_choices_to_input": False,
        **fields,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def scored_of(task: str, correct, chance: float = 0.5, score=None, gold_loglik=None, gold_logprob=None):
    """A :class:`~sinklab.accuracy.Scored` made by hand: ``correct`` per example (strict), ``score``
    the rotation-averaged share (default: the outcomes as 0 or 1, one order), the log-likelihoods 0."""
    from sinklab.accuracy import Scored

    n = len(correct)
    score = tuple(float(c) for c in correct) if score is None else tuple(score)
    zeros = (0.0,) * n
    return Scored(
        task=task, split="validation", shots=0, chance=chance, rotations=1, listed=True, acc=sum(score) / n, acc_stderr=0.0,
        acc_norm=sum(score) / n, acc_norm_stderr=0.0, acc_strict=sum(map(bool, correct)) / n, score=score,
        correct=tuple(map(bool, correct)), gold_loglik=tuple(gold_loglik or zeros), gold_logprob=tuple(gold_logprob or zeros),
        entropy=zeros, acc_by_position=(None, None), picks_by_position=(0.5, 0.5), answers_by_position=(0.5, 0.5),
    )  # fmt: skip


def planted_model(tokenizer, strength: float = 6.0, gain_a: float = 1.0):
    """One layer, two heads, uniform attention (zero queries and keys). Head 0 carries the initial
    token's value to the logit of choice A and every other token's to B's; head 1 carries nothing.
    So the more head 0 attends to the initial token, the likelier A: its sink share decides.
    ``gain_a`` weighs A's logit: A wins where the initial token's share passes 1 / (1 + gain_a)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=8,
        intermediate_size=4,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=4,
        max_position_embeddings=512,  # room for sinklab compress (a context, then 256 tokens)
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    a, b = tokenizer.convert_tokens_to_ids(["A", "B"])
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.model.layers[0].input_layernorm, model.model.layers[0].post_attention_layernorm, model.model.norm):
            norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, 1] = 1.0
        emb[tokenizer.bos_token_id] = 0.0
        emb[tokenizer.bos_token_id, 0] = 1.0
        attn = model.model.layers[0].self_attn
        attn.v_proj.weight[0, 0] = 1.0  # head 0, dim 0: "this is the initial token"
        attn.v_proj.weight[1, 1] = 1.0  # head 0, dim 1: "this is any other token"
        attn.o_proj.weight[3, 0] = strength
        attn.o_proj.weight[4, 1] = strength
        model.lm_head.weight[a, 3] = gain_a
        model.lm_head.weight[b, 4] = 1.0
    return model
