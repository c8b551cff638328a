"""The command line as a user meets it: one-line errors for bad input, defaults that work for any
budget, every option generated from its registry, and interrupts that promise only what is true."""

import pytest

from sinklab import cli
from sinklab.core.attention import EXTRA_NAMES
from sinklab.intervene import INTERVENTIONS
from sinklab.pretrain import PretrainConfig


def one_line_error(capsys, *needles) -> str:
    """The one ``sinklab ...`` line on stderr (progress bars of model loading may precede it)."""
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("sinklab ")]
    assert "Traceback" not in err and len(ours) == 1, err
    for needle in needles:
        assert needle in ours[0]
    return ours[0]


def test_generate_refuses_a_negative_token_count(tiny_model_dir, capsys):
    assert cli.main(["generate", str(tiny_model_dir("llama")), "--max-new-tokens", "-5"]) == 2
    one_line_error(capsys, "--max-new-tokens must be at least 1")


def test_short_pretraining_gets_a_proportional_warmup():
    assert PretrainConfig(steps=30).warmup == 3
    assert PretrainConfig().warmup == PretrainConfig().steps // 10
    assert PretrainConfig(steps=30, warmup=0).warmup == 0


def test_pretrain_refuses_a_warmup_past_the_budget(capsys):
    assert cli.main(["pretrain", "--steps", "10", "--warmup", "10", "--out", "/tmp/never"]) == 2
    one_line_error(capsys, "--warmup must lie in [0, steps)")


@pytest.mark.parametrize("prompt", ["", "To"])
def test_scan_refuses_inputs_too_short_for_the_metrics(prompt, tiny_model_dir, tmp_path, capsys):
    code = cli.main(["scan", str(tiny_model_dir("llama")), "--prompt", prompt, "--bos", "no", "--out", str(tmp_path)])
    assert code == 2
    one_line_error(capsys)
    assert not (tmp_path / "summary.json").exists()


def test_every_intervention_and_extra_has_its_flag():
    help_text = {name: cli.build_parser()._subparsers._group_actions[0].choices[name].format_help() for name in ("intervene", "pretrain", "trigger")}
    for option in INTERVENTIONS:
        assert f"--{option.replace('_', '-')}" in help_text["intervene"]
    for extra in EXTRA_NAMES:
        assert f"--{extra.replace('_', '-')}" in help_text["pretrain"] and f"--{extra.replace('_', '-')}" in help_text["trigger"]


@pytest.mark.parametrize(
    "argv, target, promise",
    [
        (["scan"], "sinklab.cli.scan.run_scan", "nothing was saved"),
        (["stream"], "sinklab.cli.stream.run_stream", "nothing was saved"),
        (["intervene", "--suppress-sink"], "sinklab.cli.intervene.run_intervene", "nothing was saved"),
        (["trigger"], "sinklab.cli.trigger.run_lab", "run the same command to resume"),
        (["pretrain"], "sinklab.cli.pretrain.train_lm", "plus --resume"),
    ],
)
def test_interrupts_promise_a_resume_only_where_there_is_one(argv, target, promise, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupted)
    assert cli.main(argv) == 130
    err = one_line_error(capsys, "interrupted", promise)
    if "resume" not in promise:
        assert "resume" not in err


def test_report_refuses_what_is_not_a_run(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    one_line_error(capsys, "no such run directory")
    assert not (tmp_path / "missing").exists()
    assert cli.main(["report", str(tmp_path)]) == 2
    one_line_error(capsys, "is not a finished sinklab run")
