"""How sinklab compress judges and reports a compressed cache, on inputs whose answer is known: the
passkey judge reading the greedy answer's text, the paired sink effect's sign, a compression's
bytes against the dense cache's, the tables' columns, the ppl window's context and continuation,
and the static quantizer's calibration text kept apart from the text it is judged on."""

from __future__ import annotations

import json
import statistics

import pytest
import torch
import transformers
from test_lm_eval_files import files_agree

import sinklab
from sinklab.compress import report as compress_report
from sinklab.compress.evaluate import facts, passkey_answer, score_each
from sinklab.compress.frame import cell_rows, quantized_rows, sink_effect_rows
from sinklab.compress.run import CompressConfig, PressJob, job_policies
from sinklab.compress.summary import cell_figures, paired
from sinklab.compress.tasks import ANSWER_TOKENS, CONTINUATION, Passkey, text_window
from sinklab.core.schemas import validate
from sinklab.kvcache import Compression, StaticKV

# --------------------------------------------------------------------------- the passkey judge


class CharTokenizer:
    """One token per character: the digits are ids 0-9, then space, '?', '.' and 'x'."""

    chars = "0123456789 ?.x"
    bos_token_id = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.chars.index(c) for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.chars[i] for i in ids)


def chain_model(chain: str):
    """A one-layer Llama over :class:`CharTokenizer`'s characters that predicts, whatever came
    before, the character after the current one in ``chain`` (attention and FFN write nothing: the
    one-hot embedding, normalised to 4, meets an LM head weight of 10 on the next character)."""
    tok = CharTokenizer()
    config = transformers.LlamaConfig(
        vocab_size=len(tok.chars), hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name else p.zero_()
        model.model.embed_tokens.weight[:, : len(tok.chars)] = torch.eye(len(tok.chars))
        ids = tok(chain)["input_ids"]
        for now, after in zip(ids, ids[1:]):
            model.lm_head.weight[after, now] = 10.0
    return model


@torch.no_grad()
def test_the_passkey_judge_reads_the_first_integer_of_the_decoded_answer():
    """A model that answers "?" with " 12345." (then "." again): the key 12345 is judged correct,
    ranked first, with a log-probability of about 0; the key 54321 is judged wrong (the answer's
    text holds another integer) and its first digit is not the model's first choice after the
    space. Mutation tried: the judge reading the answer's token ids (str(answer)) instead of the
    decoded text fails here."""
    tok, model = CharTokenizer(), chain_model("? 12345..")
    context = torch.tensor([tok("xxxxxxxx")["input_ids"]])
    cache = model(context, use_cache=True).cache
    question = torch.tensor([tok("?")["input_ids"]])
    right = passkey_answer(model, tok, cache, Passkey(context, question, 12345, 0.5))
    assert right["correct"] is True and right["rank"] == 1 and right["logprob"] == pytest.approx(0.0, abs=1e-6)
    wrong = passkey_answer(model, tok, cache, Passkey(context, question, 54321, 0.5))
    assert wrong["correct"] is False and wrong["logprob"] < -10
    assert tok.decode(tok(" 12345...")["input_ids"][:ANSWER_TOKENS]) == " 12345.."  # what the model says


# --------------------------------------------------------------------------- figures and tables


def passkey(accuracy, logprobs):
    return {"accuracy": accuracy, "logprobs": logprobs, "logprob_mean": sum(logprobs) / len(logprobs)}


def test_the_sink_effect_is_the_relative_change_from_keeping_no_sink():
    """Perplexity 10 with no sink kept and 8 with one: -20 % (lower is better, so keeping the sink
    helped); 12.5 with four: +25 %. The passkey changes are the kept cell's minus the unkept's.
    Mutation tried: the change inverted (base / cell - 1: +25 % and -20 %) fails here."""
    where = {"press": "knorm", "ratio": 0.5, "context": 128}
    cells = [
        {**where, "keep_sinks": 0, "ppl": {"t": 10.0}, "passkey": passkey(0.5, [-4.0, -6.0])},
        {**where, "keep_sinks": 1, "ppl": {"t": 8.0}, "passkey": passkey(1.0, [-1.0, -7.0])},
        {**where, "keep_sinks": 4, "ppl": {"t": 12.5}, "passkey": passkey(0.0, [-5.0, -8.0])},
    ]
    one, four = paired(cells, ("press", "ratio", "context"), "keep_sinks")
    assert (one["keep_sinks"], four["keep_sinks"]) == (1, 4)
    assert one["ppl_change"] == {"t": pytest.approx(-0.2)} and four["ppl_change"] == {"t": pytest.approx(0.25)}
    assert one["accuracy_change"] == 0.5 and one["logprob_change"] == pytest.approx(1.0)
    assert (one["prompts_more_likely"], one["prompts"]) == (1, 2) and one["logprob_change_std"] == pytest.approx(2.0)
    assert four["accuracy_change"] == -0.5 and four["logprob_change"] == pytest.approx(-1.5)


def test_a_compressions_facts_are_its_kept_fraction_and_its_bytes_against_the_dense_caches():
    """Two layers keeping 5 of 20 keys per head, the cache down from 1,000 bytes to 400: a kept
    fraction of 0.25 and a bytes ratio of 0.4 (after over before: below 1 is smaller). Mutation
    tried: bytes before over after (2.5) fails here."""
    kept = {0: torch.zeros(1, 2, 5, dtype=torch.long), 1: torch.zeros(1, 2, 5, dtype=torch.long)}
    compression = Compression(20, positions=kept, sinks=[0], bytes_before=1000, bytes_after=400)
    assert facts(compression) == {"kept_fraction": 0.25, "bytes_ratio": 0.4, "sinks": [0]}


PRESS = {"policy": "knorm", "kind": "press", "ratio": 0.5, "bits": None}
KIVI2 = {"policy": "kivi", "kind": "quantizer", "ratio": None, "bits": 2}


def test_each_tables_column_carries_its_own_figure():
    """A hand-made summary whose every figure differs: each column of the cells (a press's and a
    quantizer's, in one schema), quantized and sink-effect tables holds its own. Mutation tried:
    the bytes_ratio column showing the kept fraction fails here."""
    figures = dict(ppl={"t": 9.0}, ppl_ratio={"t": 1.5}, passkey=passkey(0.75, [-2.0]), kept_fraction=0.5, bytes_ratio=0.52)
    summary = {
        "model": "m", "dtype": "float32", "device": "cpu",
        "cells": [{**PRESS, "keep_sinks": 1, "context": 128, **figures},
                  {**KIVI2, "keep_sinks": 1, "context": 128, **figures, "kept_fraction": 1.0, "bytes_ratio": 0.2}],
        "sink_effect": [{**PRESS, "context": 128, "keep_sinks": 1, "ppl_change": {"t": -0.2},
                         "accuracy_change": 0.25, "logprob_change": 1.0, "logprob_change_std": 0.5,
                         "prompts_more_likely": 3, "prompts": 4}],
    }  # fmt: skip
    lead = {"model": "m", "dtype": "float32", "device": "cpu"}
    shared = {"ppl_t": 9.0, "ppl_ratio_t": 1.5, "passkey_accuracy": 0.75, "key_logprob": -2.0}
    quantizer_row = {**lead, **KIVI2, "keep_sinks": 1, "context": 128, **shared, "kept_fraction": 1.0, "bytes_ratio": 0.2}
    assert list(cell_rows(summary)) == [
        {**lead, **PRESS, "keep_sinks": 1, "context": 128, **shared, "kept_fraction": 0.5, "bytes_ratio": 0.52},
        quantizer_row,
    ]  # fmt: skip
    assert list(quantized_rows(summary)) == [quantizer_row]
    assert list(sink_effect_rows(summary)) == [
        {**lead, **PRESS, "context": 128, "keep_sinks": 1, "ppl_change_t": -0.2,
         "accuracy_change": 0.25, "logprob_change": 1.0, "logprob_change_std": 0.5, "prompts_more_likely": 3, "prompts": 4}
    ]  # fmt: skip


def choice_effect(keep_sinks: int, gain: float) -> dict:
    """A sink-effect entry of one multiple-choice task whose correct choice's log-likelihood moved by ``gain``."""
    change = {"acc_change": {"mean": -0.1}, "mcnemar": {"p": 0.5}, "gold_loglik_change": {"mean": gain}}
    return {**PRESS, "context": 128, "keep_sinks": keep_sinks, "choice_change": {"t": change}}


@pytest.mark.parametrize(
    "gains, said",
    [((-0.9, -0.51), "lost least, -0.51 nats"), ((-0.9, 0.51), "gained most, +0.51 nats"), ((0.0,), "gained most, +0.00 nats")],
)
def test_the_choice_statement_says_lost_least_where_every_cell_lowered_the_correct_choice(gains, said):
    """The sentence read "where the correct choice gained most, -0.51 nats": where the largest
    change is negative, it now says the correct choice lost least; a gain is still a gain. Mutation: the fixed
    "gained most" fails the first case."""
    summary = {"presses": ["knorm"], "quantizers": [], "sink_effect": [choice_effect(k, g) for k, g in enumerate(gains, 1)]}
    (line,) = [line for line in compress_report.statements(summary) if "multiple-choice" in line]
    assert said in line and ("gained most" in line) == (max(gains) >= 0)


# --------------------------------------------------------------------------- the texts


def numbered_text(doc: str, words: int) -> str:
    """Words that name their document and their place ("b-w17"): any dozen tokens of one document
    appear in no other."""
    return " ".join(f"{doc}-w{i}" for i in range(words))


@pytest.fixture
def three_documents(tmp_path):
    """A corpus folder of three documents, read in name order: a (about 1,800 tokens of the tiny
    tokenizer), then b and c."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for doc, words in (("a", 300), ("b", 400), ("c", 400)):
        (folder / f"{doc}.txt").write_text(numbered_text(doc, words))
    return folder


def test_a_text_window_is_the_contexts_first_tokens_then_the_scored_continuation(tokenizer, three_documents):
    """The ppl input over a 20-token context: BOS and the first 19 tokens of the first document,
    then the next CONTINUATION + 1 tokens (the first fed to the compressed cache, the rest scored).
    Mutation tried: the context shifted by one token either way fails here."""
    window = text_window(tokenizer, str(three_documents), 20, "yes")
    stream = [tokenizer.bos_token_id, *tokenizer(numbered_text("a", 300), add_special_tokens=False)["input_ids"]]
    assert window.context[0].tolist() == stream[:20]
    assert window.continuation[0].tolist() == stream[20 : 20 + CONTINUATION + 1]


def grams(ids: list[int], n: int = 12) -> set:
    return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}


def test_the_static_quantizer_never_calibrates_on_the_text_it_is_judged_on(three_documents, tiny_model_dir, monkeypatch):
    """The static quantizer's scales come from windows of the corpus after the documents the ppl
    window reads (here: a), so no stretch of the judged text is among them, while b and c are.
    Mutation tried: calibrating from the corpus's start (skip = 0) fails here."""
    loaded = sinklab.load_model(str(tiny_model_dir("llama")))
    cfg = CompressConfig(presses=(), quantizers=("static",), bits=(8,), keep_sinks=(0,), contexts=(128,),
                         corpus=str(three_documents), outside=None)  # fmt: skip
    seen, real = [], StaticKV.calibrated

    def calibrated(self, model, windows):
        seen.append(windows)
        return real(self, model, windows)

    monkeypatch.setattr(StaticKV, "calibrated", calibrated)
    policies = job_policies(PressJob(cfg, "static"), loaded)
    assert list(policies) == ["8/0"] and isinstance(policies["8/0"], StaticKV) and len(seen) == 1
    judged = grams(text_window(loaded.tokenizer, cfg.corpus, 128, cfg.bos).ids[0].tolist())
    calibrated = set().union(*(grams(w.tolist()) for w in seen[0]))
    ids = lambda doc: loaded.tokenizer(numbered_text(doc, 400), add_special_tokens=False)["input_ids"]  # noqa: E731
    later = grams(ids("b") + ids("c"))  # each document tokenised alone, then joined
    assert calibrated and not calibrated & judged and calibrated <= later


def test_passkey_accuracy_counts_the_judges_greedy_answers_not_the_keys_rank():
    """Accuracy is the share of prompts whose greedy answer was the key (``correct``), not of those
    where the key's first token ranked first: a key can rank first and still not be what the model
    wrote (its later digits), or be written though another first token ranked above it. Mutation
    tried: accuracy as ``rank == 1`` passed every test."""

    def scores(correct: bool, rank: int, logprob: float) -> dict:
        return {"correct": correct, "rank": rank, "logprob": logprob, "kept_fraction": 0.5, "bytes_ratio": 0.5, "sinks": [0]}

    rows = {
        "128|passkey:0.1:11111": {"0.5/0": scores(True, 3, -1.0)},
        "128|passkey:0.5:22222": {"0.5/0": scores(False, 1, -2.0)},
        "128|passkey:0.9:33333": {"0.5/0": scores(True, 2, -3.0)},
    }
    figures = cell_figures(rows, 128, "0.5/0", {"128": {}})["passkey"]
    assert figures["accuracy"] == pytest.approx(2 / 3)
    assert figures["accuracy_by_depth"] == {"0.1": 1.0, "0.5": 0.0, "0.9": 1.0}
    assert figures["rank_median"] == 2 and figures["logprobs"] == [-1.0, -2.0, -3.0]


# --------------------------------------------------------------------------- the multiple-choice judge

#: A few-shot judge small enough for tiny models: 3 shots, 12 test examples.
SHOTS, TEST = 3, 12
#: Multi-token choices (several tokens each with the test tokenizer), so that each is read token by token.
LONG_CHOICES = ("tree stone", "river light", "sea wind", "cloud field")


def judged_run(tokenizer, task_path, model=None, **settings):
    """``sinklab compress --accuracy`` (StreamingLLM at 7/8 of the shots removed, with and without
    the sink; the perplexity of a 128-token context beside it) on ``model``, by default the planted
    one (its head 0 carries the initial token's value to choice A, every other token's to B, and
    A's logit weighs 90 times B's: A wins where the initial token gets more than 1/91 of head 0)."""
    from conftest import planted_model

    model = model if model is not None else planted_model(tokenizer, gain_a=90.0)
    grid = dict(presses=("streaming_llm",), ratios=(0.875,), keep_sinks=(0, 1), tasks=("ppl",), contexts=(128,),
                outside=None, accuracy=(str(task_path),), accuracy_shots=SHOTS, accuracy_test=TEST)  # fmt: skip
    return model, sinklab.compress_model(model, tokenizer, **{**grid, **settings})


def test_the_dense_cell_of_the_choice_judge_is_lm_evals_plain_run(tmp_path, tokenizer, tiny_model_dir):
    """The full cache (ratio 0) read as the judge reads it (the shots prefilled, then the query and
    each choice, token by token, through the cache) gives lm-eval's own scores of the same prompts,
    on a random model (which reads every token's content and place) with a task prefix and choices
    of several tokens. Mutations tried: the query fed reversed, a choice scored by its first token
    only, the choices read through a cache that never saw the query: each moves a log-likelihood by
    more than 1e-3."""
    from conftest import write_task

    from sinklab.accuracy import evaluate, lm_for, read_task, sizes_for

    path = write_task(tmp_path / "long" / "task.json", n=60, choices=LONG_CHOICES, gold="river light", task_prefix="Pick one.\n")
    loaded = sinklab.load_model(str(tiny_model_dir("llama", positions=1024)))
    _, result = judged_run(loaded.tokenizer, path, model=loaded)
    dense = result.summary["dense"]["128"]["choice"]["long"]
    (plain,) = evaluate(
        lm_for(loaded.model, loaded.tokenizer), [read_task(str(path))], "test", SHOTS, sizes_for(SHOTS, test=TEST)
    )
    assert len(dense["correct"]) == plain.n == TEST and dense["correct"] == list(plain.correct)
    assert torch.allclose(torch.tensor(dense["gold_loglik"]), torch.tensor(plain.gold_loglik), atol=1e-5)
    assert max(plain.gold_loglik) - min(plain.gold_loglik) > 1e-3  # a model whose answers depend on the example


def test_keeping_the_planted_sink_keeps_the_answer_it_carries(tmp_path, tokenizer):
    """Evicting 7/8 of the shots without the sink drops the initial token, and with it all of choice
    A's evidence; keeping it raises its share of head 0 from 1/160 to 1/130 (the full prompts) to
    1/56 to 1/34, past the 1/91 where A wins. So A, the correct choice, loses with the full cache and without
    the sink and wins with it, on every example, and the paired verdict says so in the keep-sink
    table's columns."""
    from conftest import write_task

    path = write_task(tmp_path / "gold_a" / "task.json", n=60)
    _, result = judged_run(tokenizer, path, out=tmp_path / "run")
    validate(json.loads(json.dumps(result.summary)))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    cells = {f"gold_a|streaming_llm:0.875/{c['keep_sinks']}": c["choice"]["gold_a"] for c in summary["cells"]}
    files_agree(tmp_path / "run", {"gold_a|dense:0/0": summary["dense"]["128"]["choice"]["gold_a"], **cells})  # issue 50
    assert result.summary["dense"]["128"]["choice"]["gold_a"]["acc"] == 0
    cells = result.frame().set_index("keep_sinks")
    assert (cells.loc[0, "acc_gold_a"], cells.loc[1, "acc_gold_a"]) == (0, 1)
    assert cells.loc[0, "gold_loglik_gold_a"] < cells.loc[1, "gold_loglik_gold_a"]
    (effect,) = result.frame("sink_effect").to_dict("records")
    assert effect["keep_sinks"] == 1 and effect["acc_change_gold_a"] == 1 and effect["mcnemar_p_gold_a"] < 0.01
    assert effect["acc_change_low_gold_a"] == effect["acc_change_high_gold_a"] == 1  # every example gained
    assert effect["gold_loglik_change_gold_a"] == pytest.approx(
        cells.loc[1, "gold_loglik_gold_a"] - cells.loc[0, "gold_loglik_gold_a"]
    )
    choice = result.summary["cells"][1]["choice"]["gold_a"]
    assert choice["kept_fraction"] < 0.2 and choice["bytes_ratio"] < 1  # the shots were compressed


def test_a_kept_job_without_lm_evals_output_is_run_again_when_accuracy_is_judged(tmp_path):
    """A stopped ``--accuracy`` run resumed after sinklab began writing lm-eval's files: a job kept
    without lm-eval's output (``lm_eval``) would leave its cells out of them, so it is run again;
    without ``--accuracy`` nothing of the kind is needed. Mutation tried: the filter dropped (the
    old job is reused and ``lm_eval_files`` finds no ``lm_eval``)."""
    from sinklab.compress.run import JOBS_DIR, finished_jobs

    (tmp_path / JOBS_DIR).mkdir()
    (tmp_path / JOBS_DIR / "dense.json").write_text(json.dumps({"facts": {}, "rows": {}, "lm_eval": {}}))
    (tmp_path / JOBS_DIR / "knorm.json").write_text(json.dumps({"facts": {}, "rows": {}}))
    assert set(finished_jobs(tmp_path, accuracy=True)) == {"dense"}
    assert set(finished_jobs(tmp_path)) == {"dense", "knorm"}


def test_the_choice_judges_kept_fraction_and_bytes_are_the_means_over_every_prompt(tmp_path, tokenizer, monkeypatch):
    """Each test prompt's shots (of different lengths) are compressed on their own, so each keeps its
    own fraction and bytes; the cell's figures are their means over the prompts, checked against
    what every compression reported. Mutation: the last prompt's figures alone (``done[cell][-1]``)
    fail here, the prompts' fractions differing by more than the tolerance."""
    from conftest import write_task

    from sinklab.compress import judged

    seen: dict = {}

    def recording(model, policies, inputs):
        for name, cell, scores in score_each(model, policies, inputs):
            seen.setdefault(cell, []).append((scores["kept_fraction"], scores["bytes_ratio"]))
            yield name, cell, scores

    monkeypatch.setattr(judged, "score_each", recording)
    _, result = judged_run(tokenizer, write_task(tmp_path / "gold_a" / "task.json", n=60))
    kept, sizes = zip(*seen["0.875/1"])
    assert len(kept) == TEST and abs(kept[-1] - statistics.fmean(kept)) > 1e-4 and len(set(sizes)) > 1
    (cell,) = [c for c in result.summary["cells"] if c["keep_sinks"] == 1]
    choice = cell["choice"]["gold_a"]
    assert choice["kept_fraction"] == pytest.approx(statistics.fmean(kept), abs=1e-12)
    assert choice["bytes_ratio"] == pytest.approx(statistics.fmean(sizes), abs=1e-12)


def test_the_query_starts_where_the_shots_end(tmp_path, tokenizer):
    """What the judge compresses is the prompt before the query: BOS, the task's prefix and the
    shots; the rest is the example's query, whole (a token straddling the separator may join it).
    Mutation tried: the split one token later (part of the query compressed) fails."""
    from conftest import planted_model, write_task

    from sinklab.accuracy import lm_for, questions, read_task, sizes_for

    task = read_task(str(write_task(tmp_path / "t" / "task.json", n=60, task_prefix="Choose.\n")))
    sizes = sizes_for(2, test=5)
    examples = task.splits(0, **sizes)["test"]
    for question, example in zip(questions(lm_for(planted_model(tokenizer), tokenizer), task, "test", 2, sizes), examples):
        context = question.pairs[0][0]
        before, query = tokenizer.decode(context[1 : question.query_start]), tokenizer.decode(context[question.query_start :])
        assert before + query == question.asked[0][0] and before.startswith("Choose.\n") and before.count("Answer:") == 2
        assert query.endswith(example.query) and len(query) - len(example.query) <= len(task.separator)


@pytest.mark.parametrize(
    "settings, needle",
    [
        (dict(accuracy_shots=0), "--accuracy-shots must be at least 1"),
        (dict(accuracy_test=1), "--accuracy-test must be at least 2"),
        (dict(bos="no"), "drop --bos no"),
        (dict(accuracy=("no_such_task.json",)), "no task file at no_such_task.json"),
        (dict(accuracy_test=96), r"has 100 usable examples; its splits need 101: 96 test, 5 for the shot pool$"),
        (dict(accuracy_shots=30), "positions; give fewer --accuracy-shots"),
    ],
)
def test_a_choice_judge_that_cannot_run_is_refused_in_one_line(tmp_path, tokenizer, settings, needle):
    """Each before anything runs. The planted model has 512 positions: 30 shots do not fit."""
    from conftest import write_task

    path = write_task(tmp_path / "t" / "task.json", n=100)
    with pytest.raises(sinklab.SinklabError, match=needle):
        judged_run(tokenizer, path, **settings)


def test_two_tasks_of_one_name_are_refused_before_claiming(tmp_path, tokenizer):
    """Two task files in folders of the same name would write one task's figures over the other's."""
    from conftest import write_task

    first, second = (write_task(tmp_path / where / "same" / "task.json", n=60) for where in ("a", "b"))
    with pytest.raises(sinklab.SinklabError, match="name same twice"):
        judged_run(tokenizer, first, accuracy=(str(first), str(second)))


def test_a_summary_of_the_older_schema_reads_as_todays():
    """A run directory written before presses and quantizers shared one cell schema (version 2:
    quantizers under ``quantized``, named ``quantizer``/``protect``, presses under ``press``) gives
    today's tables. Mutation: current() returning the summary as it is fails on its missing keys."""
    figures = dict(ppl={"t": 9.0}, ppl_ratio={"t": 1.5}, passkey=passkey(0.75, [-2.0]), kept_fraction=0.5, bytes_ratio=0.52)
    effect = {"ppl_change": {"t": -0.2}, "accuracy_change": 0.25}
    today = {
        "model": "m", "dtype": "float32", "device": "cpu",
        "cells": [{**PRESS, "keep_sinks": 1, "context": 128, **figures}, {**KIVI2, "keep_sinks": 1, "context": 128, **figures}],
        "sink_effect": [{**where, "context": 128, "keep_sinks": 1, **effect} for where in (PRESS, KIVI2)],
    }  # fmt: skip
    older = {
        "model": "m", "dtype": "float32", "device": "cpu",
        "cells": [{"press": "knorm", "ratio": 0.5, "keep_sinks": 1, "context": 128, **figures}],
        "quantized": [{"quantizer": "kivi", "bits": 2, "protect": 1, "context": 128, **figures}],
        "sink_effect": [{"press": "knorm", "ratio": 0.5, "context": 128, "keep_sinks": 1, **effect}],
        "quantized_sink_effect": [{"quantizer": "kivi", "bits": 2, "context": 128, "protect": 1, **effect}],
    }  # fmt: skip
    assert list(cell_rows(older)) == list(cell_rows(today)) and list(sink_effect_rows(older)) == list(sink_effect_rows(today))
