"""``sinklab tune``: ZeroTuning and ACT found, searched and judged on a planted model whose answer
is decided by how much attention one head pays the initial token, through lm-eval on task files
the test writes (the BIG-bench download is never used here)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import one_line_error, planted_model, write_task
from test_lm_eval_files import files_agree

import sinklab
from sinklab import applied
from sinklab.accuracy import read_task
from sinklab.core.errors import SinklabError
from sinklab.tune import ACT, ZeroTuning, load_tuning, save_tuning

SIZES = dict(validation=6, test=8)
#: ``sinklab tune`` flags for ACT on the tiny fixtures (3 layers: the official range would leave none).
TINY_ACT = ["--validation", "6", "--test", "8", "--method", "act", "--act-layers", "all"]


@pytest.fixture
def planted(tokenizer):
    return planted_model(tokenizer)


@pytest.mark.parametrize("gold,direction", [("A", 1), ("B", -1)])
def test_zerotuning_finds_the_direction_of_gamma_that_the_planted_head_wants(tmp_path, tokenizer, planted, gold, direction):
    task = write_task(tmp_path / f"planted_{gold}" / "task.json", gold=gold)
    result = sinklab.tune_model(planted, tokenizer, tasks=(str(task),), method="zerotuning", **SIZES)
    profile = result.data["profiles"][f"planted_{gold}"]
    assert profile[0, 0] * direction > 0 and abs(profile[0, 1]) < 1e-6 * abs(profile[0, 0])
    tuning = result.data["tunings"][f"planted_{gold}"]
    assert isinstance(tuning, ZeroTuning) and (tuning.gammas[0][0] - 1) * direction > 0 and tuning.gammas[0][1] == 1.0
    row = result.frame().iloc[0]
    assert row["gold_loglik_tuned"] > row["gold_loglik_untouched"]
    assert row["acc_tuned"] >= row["acc_untouched"]


def test_the_unsupervised_mode_lowers_the_entropy_over_the_choices_without_reading_labels(tmp_path, tokenizer, planted):
    runs = [
        sinklab.tune_model(
            planted, tokenizer, tasks=(str(write_task(tmp_path / g / "task.json", gold=g)),), mode="unsupervised", **SIZES
        )
        for g in ("A", "B")
    ]
    tunings = [next(iter(r.data["tunings"].values())) for r in runs]
    assert tunings[0] == tunings[1]  # the labels differ, the choice does not
    rows = runs[0].frame("validation")
    assert rows[rows["chosen"]]["entropy"].iloc[0] < rows[rows["label"] == "untouched"]["entropy"].iloc[0]


def later_sink_model(tokenizer, marker: str = ":", pull: float = 2.5, strength: float = 6.0):
    """One layer, two heads. Head 0's queries all ask for the ``marker`` token (a query bias meets a
    key only the marker has, in the pair of dimensions that RoPE at theta 1e8 barely turns), so each
    marker after the first token is a sink of head 0 (about 0.4 of its attention each, over ACT's
    0.1 threshold); the marker's value pulls toward choice B, every other token's toward A, and
    head 1 carries nothing. Untouched, B wins; calibrating head 0 away from its later sinks (ACT)
    gives the other tokens their mass back, and A wins."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=8, intermediate_size=4, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=4, max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False, attention_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 1e8},
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    a, b, mark = tokenizer.convert_tokens_to_ids(["A", "B", marker])
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        layer = model.model.layers[0]
        for norm in (layer.input_layernorm, layer.post_attention_layernorm, model.model.norm):
            norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, 1] = 1.0  # dim 1: any other token
        emb[tokenizer.bos_token_id] = torch.eye(8)[0]  # dim 0: the initial token
        emb[mark] = torch.eye(8)[2]  # dim 2: the marker
        attn = layer.self_attn
        attn.q_proj.bias[1] = pull  # head 0's query, dimension 1: rotated at 1e-4 rad a position
        attn.k_proj.weight[1, 2] = 1.0  # the marker's key meets it
        attn.v_proj.weight[0, 2] = 1.0  # head 0, value dim 0: "the marker"
        attn.v_proj.weight[1, 1] = 1.0  # head 0, value dim 1: "any other token"
        attn.o_proj.weight[4, 0] = strength
        attn.o_proj.weight[3, 1] = strength
        model.lm_head.weight[a, 3] = 1.0
        model.lm_head.weight[b, 4] = 1.0
    return model


def test_act_finds_the_head_whose_later_sink_hides_the_answer_and_calibrating_it_helps(tmp_path, tokenizer):
    """ACT on a model whose head 0 sinks on a later token that carries the wrong answer: the
    profile points at head 0 (and not at head 1, which carries nothing), the search calibrates it,
    and the test split's accuracy (0 untouched) and gold log-likelihood rise. Mutation tried: the
    edit's strength fixed at 0 (the sinks' weight left whole) finds nothing to calibrate and fails."""
    model = later_sink_model(tokenizer)
    task = write_task(tmp_path / "later" / "task.json", gold="A")
    result = sinklab.tune_model(model, tokenizer, tasks=(str(task),), method="act", act_layers="all", **SIZES)
    profile = result.data["profiles"]["later"]
    assert profile[0, 0] > 0 and abs(profile[0, 1]) < 1e-6 * profile[0, 0]
    assert result.data["tunings"]["later"] == ACT(((0, 0),))
    row = result.frame().iloc[0]
    assert row["acc_untouched"] < 0.5 < row["acc_tuned"] and row["gold_loglik_tuned"] > row["gold_loglik_untouched"]
    # the paired changes are tuned minus untouched (mutation caught: the verdict's runs swapped)
    assert row["acc_change"] > 0 and row["acc_change"] == pytest.approx(row["acc_tuned"] - row["acc_untouched"])
    assert row["gold_loglik_change"] == pytest.approx(row["gold_loglik_tuned"] - row["gold_loglik_untouched"])


def test_zerotuning_scales_the_profiled_heads_at_their_layer_and_head():
    """On 2 layers x 4 heads (the top quarter: 2 heads), the head the profile says wants more of
    the initial token gets gamma, the one that wants less 1 / gamma, every other head 1.
    Mutation caught: the flat gammas cut into layers by stride (``gammas[r::layers]``), which
    a one-layer model cannot tell apart."""
    from sinklab.tune.methods.zerotuning import GAMMAS

    profile = torch.zeros(2, 4)
    profile[0, 1], profile[1, 2] = 0.5, -0.8
    for (label, tuning), g in zip(ZeroTuning.candidates(profile, {}), GAMMAS):
        expected = [[1.0, g, 1.0, 1.0], [1.0, 1.0, 1.0 / g, 1.0]]
        assert [list(layer) for layer in tuning.gammas] == expected and label == f"gamma {g:g} on 2 heads"


def test_gamma_one_and_act_with_nothing_to_calibrate_leave_the_logits_bit_for_bit(tokenizer, planted):
    ids = torch.tensor([[tokenizer.bos_token_id, *tokenizer.encode("tree wind stone")]])
    with torch.no_grad():
        plain = planted(ids).logits
        with applied(planted, ZeroTuning.identity(1, 2)):
            assert torch.equal(planted(ids).logits, plain)
        with applied(planted, query_chunk=None):
            routed = planted(ids).logits  # through sinklab's attention, which ACT's edit needs
        with applied(planted, ACT(((0, 0), (0, 1)), threshold=1.0)):
            assert torch.equal(planted(ids).logits, routed)
        with applied(planted, ZeroTuning(((1.0, 2.0),))):
            assert not torch.equal(planted(ids).logits, plain)


def test_a_tuning_is_saved_and_loaded_as_json_and_a_bad_file_is_one_line(tmp_path):
    for tuning in (ZeroTuning(((1.0, 2.0), (0.5, 1.0))), ACT(((1, 0), (0, 1)), beta=0.3)):
        assert load_tuning(save_tuning(tuning, tmp_path / "t.json")) == tuning
    (tmp_path / "bad.json").write_text('{"method": "mystery"}')
    with pytest.raises(SinklabError, match="not a sinklab tuning"):
        load_tuning(tmp_path / "bad.json")


@pytest.mark.parametrize(
    "content,message",
    [
        ({"examples": [{"input": "x", "target": "y"}]}, "no 'target_scores'"),
        ({"name": "x"}, "no 'examples' list"),
        ({"examples": [{"input": "x", "target_scores": {"a": 1, "b": 1}}]}, "2 best choices"),
    ],
)
def test_a_task_file_not_in_big_benchs_multiple_choice_format_is_one_line(tmp_path, content, message):
    path = tmp_path / "t" / "task.json"
    path.parent.mkdir()
    path.write_text(json.dumps(content))
    with pytest.raises(SinklabError, match=message):
        read_task(str(path))


def test_a_split_too_small_and_a_tokenizer_without_bos_are_refused_before_anything_runs(tmp_path, tokenizer, planted):
    small = write_task(tmp_path / "small" / "task.json", n=10)
    with pytest.raises(SinklabError, match="usable examples"):
        sinklab.tune_model(planted, tokenizer, tasks=(str(small),), **SIZES)
    big = write_task(tmp_path / "big" / "task.json")
    no_bos = type(tokenizer)(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<eos>")
    assert no_bos.bos_token_id is None
    with pytest.raises(SinklabError, match="no BOS"):
        sinklab.tune_model(planted, no_bos, tasks=(str(big),), **SIZES)


def test_the_command_writes_the_run_prints_its_table_and_a_missing_task_is_one_line(tmp_path, tiny_model_dir, capsys):
    from sinklab.cli import main

    task = write_task(tmp_path / "tiny" / "task.json")
    out = tmp_path / "run"
    model = str(tiny_model_dir("llama"))
    assert (
        main(
            [
                "tune",
                model,
                "--tasks",
                str(task),
                *TINY_ACT,
                "--num-fewshot",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (out / "summary.json").exists() and (out / "report.html").exists() and (out / "tuning-tiny.json").exists()
    assert isinstance(load_tuning(out / "tuning-tiny.json"), ACT)
    summary = json.loads((out / "summary.json").read_text())
    (verdict,) = summary["tasks"]
    test = verdict["test"]  # the verdict's per-example results kept, in lm-eval's files (issue 50)
    written = files_agree(out, {"tiny|untouched": test["untouched"], "tiny|tuned": test["tuned"]})
    assert summary["shots"] == written["n-shot"]["tiny|tuned"] == 1  # --num-fewshot: lm-eval's spelling of --shots
    printed = capsys.readouterr().out.splitlines()  # the table was one line, its breaks shown as "\\n"
    header = next(i for i, line in enumerate(printed) if line.split()[:1] == ["task"])
    assert not any("\\n" in line for line in printed)
    assert set(printed[header + 1]) == {"-", " "} and printed[header + 2].split()[0] == "tiny"
    assert "choices listed" in printed[header]  # "orders 1" is told apart from a task that lists no choices
    assert main(["tune", model, "--tasks", str(tmp_path / "nowhere" / "task.json"), "--out", str(tmp_path / "r2")]) == 2
    one_line_error(capsys, "no task file")
    assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize(
    "command, flags, needle",
    [
        ("tune", ["--shots", "20", "--validation", "6", "--test", "8"], "model has 128 positions; give fewer --shots"),
        ("tune", ["--seed", "-1", "--validation", "6", "--test", "8"], "--seed must be a whole number, at least 0, got -1"),
        ("tune", ["--batch-size", "0", "--validation", "6", "--test", "8"], "--batch-size must be at least 1, got 0"),
        (
            "tune",
            ["--method", "act", "--validation", "6", "--test", "8"],
            "--act-layers official leaves none of the model's 3 layers",
        ),
        ("tune", ["--act-spare", "first_sink", "--validation", "6", "--test", "8"], "--act-spare is read only with --method act"),
        ("tune", ["--act-layers", "official"], "--act-layers is read only with --method act"),  # its default, given
        ("tune", ["--method", "act", "--batch-size", "4"], "--batch-size 4 would not be read"),
        ("tune", ["--method", "act", "--batch-size", "8"], "--batch-size 8 would not be read"),  # its default, given
        ("tune", ["--rotations", "-1", "--validation", "6", "--test", "8"], "--rotations must be 0 (every rotation)"),
        ("intervene", ["--accuracy-rotations", "-1"], "--accuracy-rotations must be 0 (every rotation)"),
        ("intervene", ["--accuracy-shots", "20", "--accuracy-test", "8"], "model has 128 positions; give fewer --accuracy-shots"),
        ("intervene", ["--accuracy-test", "1"], "--accuracy-test must be at least 2 (a standard error and a paired test"),
        ("tune", ["--validation", "1", "--test", "8"], "--validation must be at least 2"),
        ("tune", ["--validation", "6", "--test", "1"], "--test must be at least 2"),
        ("intervene-unjudged", ["--accuracy-test", "8"], "--accuracy-test is read only with --accuracy TASKS"),
        ("intervene-unjudged", ["--accuracy-shots", "2"], "--accuracy-shots is read only with --accuracy TASKS"),
        ("intervene-unjudged", ["--accuracy-rotations", "1"], "--accuracy-rotations is read only with --accuracy TASKS"),
        ("intervene-unjudged", ["--accuracy-rotations", "0"], "--accuracy-rotations is read only with --accuracy TASKS"),
        ("intervene", ["--accuracy-shots", "-2"], "--accuracy-shots must be at least 0, got -2"),
        ("intervene", ["--bos", "no"], "drop --bos no"),
    ],
)
def test_an_accuracy_judge_that_cannot_run_is_one_line_before_claiming(command, flags, needle, tmp_path, tiny_model_dir, capsys):
    """lm-eval would cut a prompt longer than the model's positions from the left, BOS first, and
    score a prompt other than the one the profile or the edit read; 0 test examples, negative shots
    and a run without BOS (the judge always puts it first) are refused as compress refuses them. A
    negative seed was a numpy traceback after the whole run (its run left "running"), and
    ``--batch-size 0`` exited 0 having judged nothing, as intervene did with an ``--accuracy-*``
    flag and no ``--accuracy`` (also one given at its default value, which the config alone cannot
    tell from one left out). A one-example split ended in a traceback from lm-eval's 'N/A'
    standard error after the run had started."""
    from sinklab.cli import main

    task = str(write_task(tmp_path / "tiny" / "task.json", n=100))
    out = tmp_path / "run"
    given = {
        "tune": ["--tasks", task],
        "intervene": ["--suppress-sink", "--random-tokens", "--tokens", "16", "--accuracy", task],
        "intervene-unjudged": ["--suppress-sink", "--random-tokens", "--tokens", "16"],
    }[command]
    assert main([command.split("-")[0], str(tiny_model_dir("llama")), *given, *flags, "--out", str(out)]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()


def test_the_notebook_refuses_a_setting_its_run_would_not_read_even_at_its_default(planted, tokenizer, tmp_path):
    """The keywords say what was given, as the command line's deferred defaults do: an ACT setting
    without ``method="act"`` and an accuracy setting without ``accuracy`` are refused at their
    default values too, before anything runs."""
    with pytest.raises(SinklabError, match="--act-layers is read only with --method act"):
        sinklab.tune_model(planted, tokenizer, tasks=("navigate",), act_layers="official", out=str(tmp_path / "t"))
    with pytest.raises(SinklabError, match="--accuracy-rotations is read only with --accuracy TASKS"):
        sinklab.intervene_model(
            planted, tokenizer, [sinklab.intervene.MaskSelf(1)], accuracy_rotations=0, out=str(tmp_path / "i")
        )
    assert not (tmp_path / "t").exists() and not (tmp_path / "i").exists()


def test_tunings_are_checked_when_made_loaded_and_applied(tmp_path, tokenizer, planted):
    with pytest.raises(SinklabError, match="positive finite"):
        ZeroTuning(((1.0, 0.0),))
    with pytest.raises(SinklabError, match="beta"):
        ACT(((0, 0),), beta=7)
    (tmp_path / "t.json").write_text('{"method": "zerotuning", "gammas": [[1.0, -1.0]]}')
    with pytest.raises(SinklabError, match="positive finite"):
        load_tuning(tmp_path / "t.json")
    with pytest.raises(SinklabError, match="gammas for 2 layers; the model has 1"):
        with applied(planted, ZeroTuning(((2.0, 1.0), (1.0, 1.0)))):
            pass
    task = str(write_task(tmp_path / "same" / "task.json"))
    with pytest.raises(SinklabError, match="name same twice"):
        sinklab.tune_model(planted, tokenizer, tasks=(task, task), **SIZES)


def test_a_negative_seed_is_refused_by_the_splits_and_the_notebook(tmp_path, tokenizer, planted):
    """Python's random took -1 as seed 1 (the same splits, silently) and numpy's bootstrap refused it
    with a traceback after the whole tuning. The configuration refuses it when made, before a task
    is read (a BIG-bench name would be fetched first). Mutations tried: no check in TuneConfig (the
    configuration is made; the preflight's splits refuse it later); no check in AccuracyTask.splits (seed
    1's splits returned)."""
    from sinklab.tune import TuneConfig

    with pytest.raises(SinklabError, match="^--seed must be a whole number, at least 0, got -1$"):
        TuneConfig(tasks=("navigate",), seed=-1)
    task = write_task(tmp_path / "tiny" / "task.json")
    with pytest.raises(SinklabError, match="^--seed must be a whole number, at least 0, got -1$"):
        read_task(str(task)).splits(-1, 0, 6, 8)
    with pytest.raises(SinklabError, match="--seed must be a whole number, at least 0, got -1"):
        sinklab.tune_model(planted, tokenizer, tasks=(str(task),), seed=-1, **SIZES)


def test_out_holding_another_commands_run_is_refused_naming_it(tmp_path, tiny_model_dir, capsys):
    """``tune --out <an intervene run>`` said the run was "written by a newer sinklab (config_version
    2...)" and ``intervene --out <a tune run>`` that "inputs is not recorded there": each compared
    another command's settings with its own. Both now say what the folder holds, and keep it."""
    from sinklab.cli import main

    model, task = str(tiny_model_dir("llama")), str(write_task(tmp_path / "tiny" / "task.json"))
    intervened, tuned = tmp_path / "intervened", tmp_path / "tuned"
    intervene = ["intervene", model, "--suppress-sink", "--random-tokens", "--tokens", "16", "--quiet", "--out"]
    tune = ["tune", model, "--tasks", task, *TINY_ACT, "--quiet"]
    tune.append("--out")
    assert main([*intervene, str(intervened)]) == 0 and main([*tune, str(tuned)]) == 0
    kept = {run: (run / "summary.json").read_text() for run in (intervened, tuned)}
    capsys.readouterr()
    assert main([*tune, str(intervened)]) == 2
    one_line_error(capsys, f"{intervened} holds an intervene run, not a tune run; choose another --out (or --overwrite")
    assert main([*intervene, str(tuned)]) == 2
    one_line_error(capsys, f"{tuned} holds a tune run, not an intervene run; choose another --out (or --overwrite")
    assert {run: (run / "summary.json").read_text() for run in (intervened, tuned)} == kept


def test_load_tunings_docstring_names_the_files_a_run_writes(tmp_path):
    """The docstring sent a reader to a run's ``tuning.json``; a run writes one
    ``tuning-<task>.json`` per task (a task's ``/`` as ``__``), which load_tuning reads back."""
    from sinklab.accuracy import LmEvalFiles
    from sinklab.core.results import RunResult
    from sinklab.tune.run import write

    tuning = ZeroTuning(((1.0, 2.0),))
    nothing_judged = LmEvalFiles((), "m", 0, 0, 2)
    names = write(tmp_path, RunResult({}, {"tunings": {"a/b": tuning}, "profiles": {}, "lm_eval": nothing_judged}))
    assert names[0] == "tuning-a__b.json" and load_tuning(tmp_path / names[0]) == tuning
    doc = " ".join(load_tuning.__doc__.split())
    assert "``tuning-<task>.json``" in doc and "``/`` written as ``__``" in doc and "``tuning.json``" not in doc


@pytest.mark.parametrize("gold, direction", [("A", 1), ("B", -1)])
def test_the_papers_one_head_at_a_time_profile_agrees_with_the_gradient_on_the_planted_head(
    tmp_path, tokenizer, planted, gold, direction
):
    """``--profile ablation``: head 0 alone at gamma 1.5 moves the objective the way the planted
    answer wants (up for A, which the sink's share carries; down for B), head 1 (which carries
    nothing) not at all; a subset of heads leaves the others unmeasured (NaN). Mutation caught: the
    untouched objective not subtracted (head 1 would read the objective itself, not 0)."""
    from sinklab.accuracy import lm_for, questions, read_task, sizes_for
    from sinklab.tune.profile import ablation_profile

    task = write_task(tmp_path / f"ablate_{gold}" / "task.json", gold=gold)
    result = sinklab.tune_model(planted, tokenizer, tasks=(str(task),), profile="ablation", **SIZES)
    assert result.summary["profile"] == "ablation"
    profile = result.data["profiles"][f"ablate_{gold}"]
    assert profile[0, 0] * direction > 0 and profile[0, 1] == 0.0
    asked = questions(lm_for(planted, tokenizer), read_task(str(task)), "validation", 0, sizes_for(0, 6, 8))
    some = ablation_profile(planted, asked, "zerotuning", "supervised", (1, 2), math.log(1.5), heads=[(0, 0)])
    assert some[0, 0] == pytest.approx(float(profile[0, 0])) and math.isnan(some[0, 1])


def test_the_ranking_benchmarks_spearman_on_hand_checked_cases():
    """benchmarks/profile_ranking.py compares the two profiles by Spearman's rho (average ranks at ties)."""
    from conftest import benchmark_module

    with benchmark_module("profile_ranking") as ranking:
        spearman = ranking.spearman
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (0, 1.5, 1.5, 3) against (0, 1, 2, 3): rho = 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))


# --------------------------------------------------------------------------- the mutation audit (issue 50, section 4)


def with_golds_by_split(path, seed: int = 0, validation: int = 6, test: int = 8):
    """Rewrite the task file at ``path`` (gold A throughout) so that its test examples answer B:
    the seeded shuffle depends on the number of examples only, so the splits hold the same
    examples, validation all A and test all B. Returns the task read back."""
    data = json.loads(path.read_text())
    tested = {e.stem.removeprefix("\nQ: ") for e in read_task(str(path)).splits(seed, 5, validation, test)["test"]}
    for example in data["examples"]:
        if example["input"] in tested:
            example["target_scores"] = {"A": 0, "B": 1}
    path.write_text(json.dumps(data))
    task = read_task(str(path))
    parts = task.splits(seed, 5, validation, test)
    assert {e.choices[e.gold] for e in parts["test"]} == {"B"} and {e.choices[e.gold] for e in parts["validation"]} == {"A"}
    return task


def test_the_profile_and_the_search_read_the_validation_split_not_the_test_split(tmp_path, tokenizer, planted):
    """Validation examples answer A (which more attention on the initial token gives, on the
    planted model) and test examples B: the profile follows validation (head 0 wants more of the
    initial token, a positive derivative) and the chosen tuning scales head 0 up, although it loses
    on the test split. Mutation caught: the head profile read from the test split (its sign flips)."""
    path = write_task(tmp_path / "golds_by_split" / "task.json", gold="A")
    with_golds_by_split(path)
    result = sinklab.tune_model(planted, tokenizer, tasks=(str(path),), **SIZES)
    profile = result.data["profiles"]["golds_by_split"]
    assert profile[0, 0] > 0 and abs(profile[0, 1]) < 1e-6 * profile[0, 0]
    assert result.data["tunings"]["golds_by_split"].gammas[0][0] > 1.0
    row = result.frame().iloc[0]
    assert row["gold_loglik_tuned"] < row["gold_loglik_untouched"]  # what suits validation costs the test split


def test_the_preflight_checks_the_validation_prompts_fit_too(tmp_path, tokenizer, planted):
    """The profile and the search read the validation split: a validation prompt past the model's
    512 positions is refused before anything runs, although every test prompt fits. Mutation
    caught: the preflight checking only the test prompts' fit."""
    from sinklab.accuracy import longest_request, sizes_for

    path = write_task(tmp_path / "long_validation" / "task.json")
    data = json.loads(path.read_text())
    held_out = {e.stem.removeprefix("\nQ: ") for e in read_task(str(path)).splits(0, 5, 6, 8)["validation"]}
    for example in data["examples"]:
        if example["input"] in held_out:
            example["input"] = " ".join(["tree wind stone river"] * 200) + " " + example["input"]
    path.write_text(json.dumps(data))
    task, sizes = read_task(str(path)), sizes_for(0, 6, 8)
    assert longest_request(task, tokenizer, "test", 0, sizes) <= 512 < longest_request(task, tokenizer, "validation", 0, sizes)
    with pytest.raises(SinklabError, match="the model has 512 positions; the task does not fit this model"):
        sinklab.tune_model(planted, tokenizer, tasks=(str(path),), **SIZES)


def test_acts_verdict_does_not_depend_on_the_batch_size(tmp_path, tokenizer, planted):
    """lm-eval right-pads a batch and passes no padding mask, so ACT at batch size 8 would count
    padded rows and the answers' rows in its sinks' means: the judge cannot tell a batched
    request's prompt from its answer, and ACT refuses it in one line rather than read every row; a
    tune run judges ACT one example at a time (its ``batch_size`` 1 or the default, which it does
    not read; another is refused), so it agrees with the evaluation at batch size 1. Mutation
    caught: ACT evaluated at the run's batch size 8."""
    from sinklab.accuracy import evaluate, lm_for, sizes_for

    path = write_task(tmp_path / "padded" / "task.json", gold="A")
    task, act = read_task(str(path)), ACT(((0, 0),))
    with applied(planted, act):
        alone = evaluate(lm_for(planted, tokenizer, 1), [task], "test", 0, sizes_for(0, 6, 8))[0]
        with pytest.raises(SinklabError, match="judge it at batch size 1"):
            evaluate(lm_for(planted, tokenizer, 8), [task], "test", 0, sizes_for(0, 6, 8))
    runs = [
        sinklab.tune_model(planted, tokenizer, tasks=(str(path),), method="act", act_layers="all", **batch, **SIZES)
        for batch in ({"batch_size": 1}, {})  # 1, what it uses, may be written out; left out, the default it does not read
    ]
    with pytest.raises(SinklabError, match="--batch-size 8 would not be read"):  # the default, given: refused
        sinklab.tune_model(planted, tokenizer, tasks=(str(path),), method="act", batch_size=8, **SIZES)
    for (one,) in (run.summary["tasks"] for run in runs):
        assert one["chosen"] == "ACT on 1 heads"
        assert one["test"]["tuned"]["gold_loglik"] == pytest.approx(sum(alone.gold_loglik) / alone.n, rel=1e-9)


def test_the_search_keeps_the_untouched_model_unless_a_tuning_beats_it():
    """Candidates made by hand: one that only ties the untouched model on validation (the same
    accuracy and gold log-probability; or the same entropy, unsupervised) is not chosen, the
    untouched model leading; one better by accuracy, or at the same accuracy by the gold
    log-probability among the choices (supervised), or by a lower entropy (unsupervised), is. Mutation caught: ``>=``
    for ``>`` in search.best (the last tied candidate chosen)."""
    from dataclasses import replace

    from conftest import scored_of

    from sinklab.tune.search import Candidate, best

    def candidate(label, right, logprob, entropy=0.6, loglik=None):
        n = len(right)
        scored = scored_of("t", right, gold_logprob=[logprob] * n, gold_loglik=[logprob if loglik is None else loglik] * n)
        return Candidate(
            label, ZeroTuning(((1.0 if label == "untouched" else 2.0, 1.0),)), replace(scored, entropy=(entropy,) * n)
        )

    untouched = candidate("untouched", [True, False, True, False], -1.0)
    tied = candidate("tied", [True, False, True, False], -1.0)
    for mode in ("supervised", "unsupervised"):
        assert best([untouched, tied], mode) is untouched
    likelier = candidate("likelier", [True, False, True, False], -0.5)
    better = candidate("better", [True, True, True, False], -3.0)
    sharper = candidate("sharper", [False] * 4, -9.0, entropy=0.3)
    assert best([untouched, tied, likelier], "supervised") is likelier
    # the tie is broken on the gold log-probability among the choices, not on the raw log-likelihood,
    # which carries the whitespace lm-eval moves into every continuation (the same for every choice)
    newline = candidate("newline", [True, False, True, False], -1.5, loglik=0.0)
    assert best([untouched, newline], "supervised") is untouched
    assert best([untouched, likelier, better, sharper], "supervised") is better
    assert best([untouched, tied, better, sharper], "unsupervised") is sharper


def test_act_candidates_take_only_the_heads_where_calibration_helps():
    """A 2 x 4 profile with two heads where calibrating helps (positive), three where it hurts and
    three where it does nothing: ACT's only candidate calibrates the two, in every layer allowed.
    Mutation caught: ACT candidates including heads where calibration hurts."""

    profile = torch.tensor([[-0.5, 0.3, 0.0, 0.0], [-0.2, 0.0, 0.1, -0.05]])
    assert ACT.candidates(profile, {"layer_range": "all"}) == [("ACT on 2 heads", ACT(((0, 1), (1, 2))))]
    assert ACT.candidates(-profile.abs(), {"layer_range": "all"}) == []


def test_the_profiles_objective_reads_the_choices_as_one_distribution():
    """On the choices' log-likelihoods -1, -2, -3: supervised, log p(gold) among the three;
    unsupervised, minus the entropy of their softmax. A constant added to every choice (the
    whitespace lm-eval moves into each continuation) changes neither. Mutation caught: the entropy
    of the raw log-likelihoods, unnormalised."""
    from sinklab.tune.profile import objective

    logliks = torch.tensor([-1.0, -2.0, -3.0])
    p = torch.softmax(logliks, dim=-1)
    assert objective(logliks, 1, "supervised").item() == pytest.approx(math.log(p[1].item()))
    assert objective(logliks, 1, "unsupervised").item() == pytest.approx((p * p.log()).sum().item())
    for mode in ("supervised", "unsupervised"):
        assert objective(logliks - 2.12, 1, mode).item() == pytest.approx(objective(logliks, 1, mode).item())


def test_the_head_profile_is_the_mean_over_the_validation_examples(tmp_path, tokenizer, planted):
    """One question asked three times profiles as that question alone, and two questions as the
    mean of their profiles (so a larger validation split does not give larger derivatives).
    Mutation caught: the profile summed instead of averaged."""
    from sinklab.accuracy import lm_for, questions, sizes_for
    from sinklab.tune.profile import head_profile

    task = read_task(str(write_task(tmp_path / "mean" / "task.json", gold="A")))
    asked = questions(lm_for(planted, tokenizer), task, "validation", 0, sizes_for(0, 6, 8))

    def profile(qs):
        return head_profile(planted, qs, "zerotuning", "supervised", (1, 2))

    first, second = profile(asked[:1]), profile(asked[1:2])
    assert first[0, 0] > 0 and second[0, 0] > 0
    torch.testing.assert_close(profile(asked[:1] * 3), first, rtol=1e-6, atol=0)
    torch.testing.assert_close(profile(asked[:2]), (first + second) / 2, rtol=1e-6, atol=0)


def test_heads_tuned_counts_the_heads_a_tuning_edits(tmp_path, tokenizer, planted):
    """ZeroTuning counts its gammas other than 1, ACT its (layer, head) pairs. On the planted model
    (one layer of 2 heads) ZeroTuning rescales the top quarter, at least one head: every candidate
    and the chosen tuning edit 1 head, the untouched model none. Mutation caught: ``heads_tuned``
    counting every head."""
    assert ZeroTuning(((1.0, 2.0), (0.5, 1.0))).scaled == 2 and ZeroTuning.identity(2, 4).scaled == 0
    assert ACT(((0, 1), (1, 0))).scaled == 2 and ACT(()).scaled == 0
    path = write_task(tmp_path / "counted" / "task.json", gold="A")
    (entry,) = sinklab.tune_model(planted, tokenizer, tasks=(str(path),), **SIZES).summary["tasks"]
    assert entry["chosen"] != "untouched" and entry["heads_tuned"] == 1
    assert [row["heads_tuned"] for row in entry["validation"]] == [0, 1, 1, 1, 1]
