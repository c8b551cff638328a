"""The command line as a user meets it: one-line errors for bad input, defaults that work for any
budget, every option generated from its registry, and interrupts that promise only what is true."""

import json

import pytest
from conftest import one_line_error

from sinklab import cli
from sinklab.core import progress
from sinklab.core.attention import EXTRA_NAMES
from sinklab.intervene import INTERVENTIONS
from sinklab.pretrain import PretrainConfig
from sinklab.trigger import analyses


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
    help_text = {
        name: cli.build_parser()._subparsers._group_actions[0].choices[name].format_help()
        for name in ("intervene", "pretrain", "trigger")
    }
    for option in INTERVENTIONS:
        assert f"--{option.replace('_', '-')}" in help_text["intervene"]
    for extra in EXTRA_NAMES:
        assert f"--{extra.replace('_', '-')}" in help_text["pretrain"] and f"--{extra.replace('_', '-')}" in help_text["trigger"]


@pytest.mark.parametrize(
    "argv, target, promise",
    [
        (["scan"], "sinklab.cli.scan.run_out", "nothing was saved"),
        (["stream"], "sinklab.cli.stream.run_out", "nothing was saved"),
        (["intervene", "--suppress-sink"], "sinklab.cli.intervene.run_out", "nothing was saved"),
        (["trigger"], "sinklab.cli.trigger.run_out", "run the same command to resume"),
        (["pretrain"], "sinklab.cli.pretrain.run_out", "run the same command to resume"),
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


def subparsers() -> dict:
    return cli.build_parser()._subparsers._group_actions[0].choices


def test_every_command_has_quiet():
    """Mutation tried: adding --quiet to all but the last command in build_parser."""
    assert all("--quiet" in command._option_string_actions for command in subparsers().values())


def test_quiet_silences_the_progress_bars_and_keeps_the_results(tiny_model_dir, tmp_path, capsys):
    """Mutation tried: ignoring the quiet switch in core.progress.progress_bar (the scan's bar
    shows on stderr under --quiet)."""
    argv = ["scan", str(tiny_model_dir("llama")), "--random-tokens", "--tokens", "12", "--batch", "2"]
    assert cli.main([*argv, "--out", str(tmp_path / "loud")]) == 0
    assert "scanning 2x12 tokens" in capsys.readouterr().err
    assert cli.main([*argv, "--quiet", "--out", str(tmp_path / "quiet")]) == 0
    captured = capsys.readouterr()
    assert "scanning" not in captured.err and "outputs:" in captured.out
    assert not progress.is_quiet()  # the switch is restored when the command ends


def test_an_existing_out_is_finished_refused_or_overwritten(tiny_model_dir, tmp_path, capsys):
    """The same configuration (an alias spelling included) is a no-op on a finished run; another
    is refused in one line naming the key; --overwrite runs it anew. Mutation tried: not
    returning on FINISHED in pipeline.run (summary.json is rewritten by the second call)."""
    out = tmp_path / "scan"
    argv = ["scan", str(tiny_model_dir("llama")), "--random-tokens", "--batch", "2", "--out", str(out)]
    assert cli.main([*argv, "--tokens", "12"]) == 0
    written = (out / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    assert cli.main([*argv, "--max-tokens", "12", "--query-chunk", "4"]) == 0  # query_chunk does not change results
    assert "holds this run, finished" in capsys.readouterr().out
    assert (out / "summary.json").stat().st_mtime_ns == written
    assert cli.main([*argv, "--tokens", "10"]) == 2
    one_line_error(capsys, "another configuration", "inputs.tokens: 12 there, 10 now", "--overwrite")
    assert cli.main([*argv, "--tokens", "10", "--overwrite"]) == 0
    assert json.loads((out / "config.json").read_text())["inputs"]["tokens"] == 10


def test_pretrain_resumes_with_the_same_command(tmp_path, monkeypatch, capsys):
    """The training itself is replaced by a stand-in that leaves a checkpoint and is killed, as a
    killed run does. Mutation tried: the pipeline's RunContext built with ``resume=False`` (the
    second call starts from scratch: calls == [False, False])."""
    from sinklab.pretrain import run as pretrain_run

    calls = []

    def killed_after_a_checkpoint(cfg, out, resume, world, data):
        calls.append(resume)
        (out / "ckpt-0000002").mkdir(exist_ok=True)
        (out / "latest").write_text("ckpt-0000002")
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain_run, "train", killed_after_a_checkpoint)
    argv = ["pretrain", "--corpus", "bb", "--steps", "5", "--out", str(tmp_path / "run")]
    assert cli.main([*argv, "--resume"]) == 2
    one_line_error(capsys, "nothing to resume")
    assert cli.main(argv) == 130 and cli.main(argv) == 130 and cli.main([*argv, "--resume"]) == 130
    assert calls == [False, True, True]
    capsys.readouterr()
    assert cli.main([*argv[:-2], "--steps", "6", "--out", str(tmp_path / "run")]) == 2
    one_line_error(capsys, "steps: 5 there, 6 now")
    assert cli.main([*argv, "--overwrite"]) == 130 and calls[-1] is False


def test_a_failed_numerical_check_exits_3_and_is_run_again(tmp_path, monkeypatch, capsys):
    """trigger --construct with no tolerance at all fails its check: status 3, results kept,
    and the same command runs it again instead of calling it finished. Mutations tried: making
    NumericalCheckFailed a SinklabError (status 2); not recording the failure in run.json (the
    second call is a no-op on the failed run, its summary still says passed False)."""
    monkeypatch.setattr(analyses, "CONSTRUCTION_TOLERANCE", 0.0)
    argv = ["trigger", "--construct", "--out", str(tmp_path)]
    assert cli.main(argv) == 3
    one_line_error(capsys, "numerical check failed", "tolerance 0")
    assert json.loads((tmp_path / "summary.json").read_text())["relu_construction"]["passed"] is False
    monkeypatch.undo()
    assert cli.main(argv) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["relu_construction"]["passed"] is True
    assert cli.main(argv) == 0 and "holds this run, finished" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command, old, new, dest, value",
    [
        ("scan", ["--max-tokens", "7"], ["--tokens", "7"], "tokens", 7),
        ("intervene", ["--max-tokens", "7"], ["--tokens", "7"], "tokens", 7),
        ("trigger", ["--layers", "2"], ["--n-layers", "2"], "layers", 2),
        ("trigger", ["--heads", "3"], ["--n-heads", "3"], "heads", 3),
        ("pretrain", ["--seq-len", "9"], ["--tokens", "9"], "seq_len", 9),
        ("pretrain", ["--bos"], ["--bos", "yes"], "bos", "yes"),
        ("stream", ["--no-bos"], ["--bos", "no"], "bos", "no"),
        ("adapt", ["--seq-len", "9"], ["--train-tokens", "9"], "seq_len", 9),
    ],
)
def test_old_spellings_are_aliases(command, old, new, dest, value):
    """Mutation tried: dropping ``*aliases`` from option()'s add_argument (--layers becomes an
    unknown option) or from flags.add_flag's (--max-tokens does)."""
    parse = cli.build_parser().parse_args
    assert getattr(parse([command, *old]), dest) == getattr(parse([command, *new]), dest) == value


def test_every_alias_says_so_and_bos_has_one_form():
    """Mutation tried: an empty alias note in flags.add_flag (the help stops naming the old spelling,
    or lm-eval's: ``tune --num-fewshot``)."""
    notes = ("the old spelling, kept as an alias", "lm-eval's spelling, accepted as an alias")
    for name, command in subparsers().items():
        for action in command._actions:
            long_flags = [flag for flag in action.option_strings if flag.startswith("--")]
            if len(long_flags) > 1:
                assert any(f"{long_flags[-1]}: {note}" in action.help for note in notes), (name, long_flags)
            if "--bos" in action.option_strings:
                default = getattr(action, "deferred_default", action.default)  # deferred: refused where not read
                assert tuple(action.choices) == ("auto", "yes", "no") and default == "auto", name


def test_exit_statuses_are_documented():
    """Mutation tried: a parser without the epilog."""
    epilog = cli.build_parser().epilog
    assert "2 a user error" in epilog and "3 a failed numerical check" in epilog


def test_every_model_argument_has_the_one_help():
    """Every command that takes a MODEL says what it takes in the one text (models.hf.MODEL_HELP; the
    stream commands add that the model must have rotary positions). Mutation tried: sinklab
    generate's own text back ("a RoPE model (default: ...)"): fails naming it."""
    from sinklab.models.hf import MODEL_HELP

    commands = cli.build_parser()._subparsers._group_actions[0].choices
    found = {name: a.help for name, p in commands.items() for a in p._actions if a.dest == "model" and not a.option_strings}
    assert {"scan", "intervene", "stream", "generate", "adapt"} <= set(found), found
    assert all(MODEL_HELP in help for help in found.values()), found


def test_sigterm_ends_a_run_as_ctrl_c_does(tmp_path):
    """``kill`` (or a scheduler stopping the job) while a run trains: exit status 130 and run.json
    says interrupted, as after Ctrl-C, so the same command resumes it. Python's default ended the
    process at once and left run.json saying running. Mutation caught: no SIGTERM handler."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from sinklab.core.runs import read_run_info

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "sinklab", "pretrain", "--corpus", "bb", "--d-model", "32", "--n-layers", "1",
           "--n-heads", "2", "--steps", "5000", "--quiet", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while read_run_info(out).get("status") != "running" and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)  # into the training loop
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert read_run_info(out)["status"] == "interrupted"
    assert "interrupted" in err


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--tokens", "16"], "--tokens is not read"),
        (["--tokens", "64"], "--tokens is not read"),  # its default, given
        (["--random-tokens"], "--random-tokens is not read"),
        (["--accuracy-test", "100"], "--accuracy-test is not read"),  # its default, given
        (["--accuracy", "navigate"], "--accuracy is not read"),
        (["gpt2"], "a MODEL is not read"),
        ([], "holds no trained softmax"),  # an empty LAB_DIR
    ],
)
def test_intervene_trigger_refuses_what_it_would_not_read_before_claiming(flags, needle, tmp_path, capsys):
    """``--trigger`` edits the trigger-lab models: a model or a model run's setting given was
    ignored (at its default value too: mutation, checking only the accuracy settings lets
    ``--tokens 16`` and ``--tokens 64`` pass), and a LAB_DIR without trained models failed after the run directory
    was claimed."""
    out = tmp_path / "run"
    assert cli.main(["intervene", *flags, "--trigger", str(tmp_path), "--suppress-sink", "--out", str(out)]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()
