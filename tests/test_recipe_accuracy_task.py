"""The recipe of docs/contributing/recipes/accuracy-task.md, followed: a new accuracy task is one
file, a BIG-bench JSON task a user brings (no code), with its own formatting fields; ``sinklab
intervene --accuracy PATH`` asks its questions as the file says and judges them against an
intervention."""

import json

import pytest
import torch
from conftest import planted_model, write_task

from sinklab import cli
from sinklab.accuracy import lm_for, questions, read_task, sizes_for

#: The file's own prompt format (BIG-bench's fields, none left at its default).
FORMAT = dict(
    task_prefix="Pick the letter.\n",
    example_input_prefix="\nQuestion: ",
    example_output_prefix="\nAnswer:",
    choice_prefix="\n - ",
    append_choices_to_input=True,
)
TEST = 8


def test_a_new_accuracy_task_is_one_file_that_intervene_judges(tmp_path, tokenizer):
    """A task file written to a folder of its own (gold A, the file's own prefixes) is judged by
    ``sinklab intervene --suppress-sink --accuracy PATH`` on the planted model, whose A rests on
    its sink (head 0 carries the initial token to A, the others to B, A weighed 200 times; the
    prompts hold 53 to 70 tokens): intact, every test question is answered A (accuracy 1); with
    the sink suppressed, none is (0). The intact gold log-likelihood is the mean over the test
    questions of log p(gold | prompt) computed directly from the model's logits, and every prompt
    is the file's format (its task prefix once, its input prefix, each choice after its choice
    prefix, its output prefix).
    Mutation tried: the file's correct choice written as B (``gold="B"``): intact accuracy 0 and
    the test fails."""
    folder = tmp_path / "planted"
    model = planted_model(tokenizer, gain_a=200.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    path = write_task(tmp_path / "tasks" / "letters" / "task.json", gold="A", n=60, **FORMAT)  # the new task: one file
    out = tmp_path / "run"
    argv = ["intervene", str(folder), "--random-tokens", "--max-tokens", "12", "--suppress-sink"]
    flags = ["--accuracy", str(path), "--accuracy-test", str(TEST), "--accuracy-rotations", "1"]
    assert cli.main([*argv, *flags, "--out", str(out), "--quiet"]) == 0

    (judged,) = json.loads((out / "summary.json").read_text())["accuracy"]
    assert judged["task"] == "letters" and judged["intact"]["n"] == TEST and judged["chance"] == 0.5
    assert judged["intact"]["acc"] == 1.0 and judged["edited"]["acc"] == 0.0
    assert judged["acc_change"]["mean"] == -1.0 and judged["gold_loglik_change"]["mean"] < 0

    asked = questions(lm_for(model, tokenizer), read_task(str(path)), "test", 0, sizes_for(0, 0, TEST), rotations=1)
    assert len(asked) == TEST
    gold = []
    for question in asked:
        context, continuation = question.pairs[question.gold]
        text = tokenizer.decode(context[1:])  # after BOS
        assert text.startswith("Pick the letter.\n\nQuestion: ") and text.count("Pick the letter.") == 1
        assert "\n - A" in text and "\n - B" in text and text.endswith("\nAnswer:")
        ids = torch.tensor([*context, *continuation])
        with torch.no_grad():
            logprobs = model(ids[None]).logits[0, :-1].log_softmax(-1)
        gold.append(sum(logprobs[len(context) - 1 + i, token].item() for i, token in enumerate(continuation)))
    assert judged["intact"]["gold_loglik"] == pytest.approx(sum(gold) / len(gold), abs=1e-4)
