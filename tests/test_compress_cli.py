"""``sinklab compress`` as a new user meets it (issue 39): a run the model cannot do is refused
before ``--out`` is touched, naming presses runs presses only (and quantizers, quantizers only),
a quantizers-only run has a table to show, and a ratio means the same to the command and to a
press."""

from __future__ import annotations

import json

import pytest
from conftest import one_line_error

import sinklab
from sinklab import cli
from sinklab import kvcache as P
from sinklab.compress import CompressConfig
from sinklab.compress import report as compress_report
from sinklab.compress.run import PressJob, run_job
from sinklab.compress.summary import CELL_GROUP, paired
from sinklab.core.errors import SinklabError
from sinklab.models.hf import LoadOptions

#: The smallest run: one press cell or one quantizer cell, ppl on the default corpus only.
SMALL = dict(ratios=(0.5,), keep_sinks=(0,), bits=(2,), group_size=8, residual=16, tasks=("ppl",), outside=None)
SMALL_FLAGS = ["--ratio", "0.5", "--keep-sinks", "0", "--task", "ppl", "--outside-corpus", "none"]


@pytest.fixture(scope="module")
def long_model(tiny_model_dir):
    """A tiny llama trained (as its config says) on 1,024 positions: room for a 128-token context."""
    return sinklab.load_model(str(tiny_model_dir("llama", positions=1024)))


def test_a_context_past_the_models_positions_is_refused_before_the_run_directory_is_claimed(tiny_model_dir, tmp_path, capsys):
    """The tiny llama has 128 positions; a 300-token context (and the 256 tokens fed after it)
    is refused in one line, before run.json or config.json exist, by the command and by the
    notebook function. Before: the run claimed --out and ran past the positions (a 9,000-token
    context on an 8,192-position model ran for 10 minutes, run.json left "running")."""
    folder, out = str(tiny_model_dir("llama")), tmp_path / "run"
    argv = ["compress", folder, "--press", "knorm", *SMALL_FLAGS, "--context", "300", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 2
    line = one_line_error(capsys, "--context 300 reads 556 positions", "has 128")
    assert "too few for sinklab compress" in line and not out.exists()
    with pytest.raises(SinklabError, match="give --context 768 or less"):
        sinklab.compress_model(
            sinklab.load_model(str(tiny_model_dir("llama", positions=1024))), presses=("knorm",), contexts=(1024,)
        )
    decoding = r"the 1056 positions decoded after it .* give --context 128 or less"  # it suggested 768, which reads 1,824
    with pytest.raises(SinklabError, match=decoding):
        sinklab.compress_model(
            sinklab.load_model(str(tiny_model_dir("llama", positions=1184))),
            presses=("knorm",),
            during="decode",
            decode_tokens=64,
            contexts=(512,),
        )


def test_naming_presses_runs_presses_only_and_naming_quantizers_quantizers_only():
    """The README's presses-only example ran every quantizer too (``--quant`` defaulted to all
    three): a two-press grid took 48 minutes instead of 15. Neither named is still the full grid;
    ``--press none`` alone is every quantizer, as its help says."""
    assert CompressConfig(presses=("snapkv",)).quantizers == ()
    assert CompressConfig(quantizers=("kivi",)).presses == ()
    grid = CompressConfig()
    assert grid.presses == tuple(P.PRESSES) and grid.quantizers == ("kivi", "static", "quanto")
    assert CompressConfig(presses=()).quantizers == ("kivi", "static", "quanto")
    args = cli.build_parser().parse_args(["compress", "--press", "snapkv,knorm", "--ratio", "0.5"])
    assert args.presses == ("snapkv", "knorm") and args.quantizers is None
    assert CompressConfig(presses=args.presses, quantizers=args.quantizers).quantizers == ()


def test_a_presses_only_run_measures_no_quantizer_and_a_quantizers_only_run_has_a_frame(long_model, tmp_path):
    """compress_model(presses=...) runs the press's job and the dense one only, and config.json
    records the grid resolved (so an older run of every quantizer is another configuration); a
    quantizers-only run's frame() is its quantizers' rows (it was empty when they were only in
    frame("quantized"), which is now a view of the one table)."""
    pressed = sinklab.compress_model(long_model, presses=("knorm",), contexts=(128,), out=tmp_path / "presses", **SMALL)
    assert pressed.summary["quantizers"] == [] and {c["kind"] for c in pressed.summary["cells"]} == {"press"}
    assert {p.name for p in (tmp_path / "presses" / "presses").iterdir()} == {"dense.json", "knorm.json"}
    saved = json.loads((tmp_path / "presses" / "config.json").read_text())
    assert saved["presses"] == ["knorm"] and saved["quantizers"] == []
    quantized = sinklab.compress_model(long_model, quantizers=("kivi",), contexts=(128,), **SMALL)
    assert quantized.summary["presses"] == [] and {c["kind"] for c in quantized.summary["cells"]} == {"quantizer"}
    frame = quantized.frame()
    assert len(frame) == 1 and frame.policy.tolist() == ["kivi"] and frame.equals(quantized.frame("quantized"))
    assert len(pressed.frame()) == 1 and pressed.frame().policy.tolist() == ["knorm"] and pressed.frame("quantized").empty


def test_a_ratio_means_the_same_to_a_press_and_to_the_command(capsys, tmp_path):
    """0 is the full cache for SnapKV(ratio=0) and for --ratio 0 (it was accepted by the class and
    refused by the command); 1 is refused by both with one message, from one check."""
    assert P.SnapKV(ratio=0).ratio == 0 and CompressConfig(ratios=(0, 0.5)).ratios == (0, 0.5)
    with pytest.raises(SinklabError) as by_class:
        P.SnapKV(ratio=1.0)
    with pytest.raises(SinklabError) as by_config:
        CompressConfig(ratios=(1.0,))
    assert str(by_class.value).replace("ratio", "--ratio", 1) == str(by_config.value)
    assert "0 (the full cache) or in (0, 1)" in str(by_config.value)
    assert cli.main(["compress", "--ratio", "1", "--out", str(tmp_path / "x"), "--quiet"]) == 2
    one_line_error(capsys, "--ratio is the fraction of the context removed")


def test_the_summary_of_a_ratio_zero_cell_follows_the_schema(long_model):
    """A cell at ratio 0 (the full cache) is a valid summary entry now that the command takes it."""
    from sinklab.core.schemas import validate

    result = sinklab.compress_model(long_model, presses=("knorm",), contexts=(128,), **{**SMALL, "ratios": (0.0,)})
    validate(result.summary)
    cell = result.summary["cells"][0]
    assert cell["ratio"] == 0 and cell["kept_fraction"] == 1 and cell["ppl_ratio"]["shakespeare"] == pytest.approx(1.0)


def test_the_positions_bound_is_exact_one_more_context_token_is_refused(tiny_model_dir):
    """A window feeds the context and the first 256 of the 257 tokens after it (the last is only a
    target): C + 256 positions. GPT-2's learned positions fail past their table, so a context of
    128 on 384 positions must run and 129 be refused (the bound was C + 257: 128 was refused, and
    its message offered 127 where 128 fits)."""
    gpt2 = sinklab.load_model(str(tiny_model_dir("gpt2", positions=384)))
    result = sinklab.compress_model(gpt2, presses=("knorm",), contexts=(128,), **SMALL)
    assert result.summary["cells"][0]["context"] == 128
    with pytest.raises(SinklabError, match="--context 129 reads 385 positions .* give --context 128 or less"):
        sinklab.compress_model(gpt2, presses=("knorm",), contexts=(129,), **SMALL)


def test_ratio_zero_is_the_dense_cache_once_and_never_a_sink_effect(long_model):
    """Ratio 0 evicts nothing: one cell per press (keep_sinks 0), and no 0 % pairs in the sink effect
    or the statements (it was computed once per keep-sinks setting and paired: "by 0% at worst
    (keep sinks 1, ratio 0...)")."""
    assert CompressConfig(ratios=(0, 0.5), keep_sinks=(0, 1)).press_grid() == [(0, 0), (0.5, 0), (0.5, 1)]
    grid = {**SMALL, "ratios": (0.0, 0.5), "keep_sinks": (0, 1)}
    summary = sinklab.compress_model(long_model, presses=("knorm",), contexts=(128,), **grid).summary
    assert [(c["ratio"], c["keep_sinks"]) for c in summary["cells"]] == [(0, 0), (0.5, 0), (0.5, 1)]
    assert [e["ratio"] for e in summary["sink_effect"]] == [0.5]
    assert not [line for line in compress_report.statements(summary) if "ratio 0," in line or "ratio 0)" in line]
    dense = [{**summary["cells"][0], "keep_sinks": k} for k in (0, 1)]  # an older grid's pair at ratio 0
    assert paired(dense, CELL_GROUP, "keep_sinks") == []


def test_a_passkey_template_longer_than_the_context_is_refused_before_claiming(tiny_model_dir, tmp_path, capsys):
    """The passkey prompts are built (tokenizer only) before --out is claimed: "2 of 2 jobs failed:
    the passkey template is longer..." came after claiming, run.json left "running"."""
    out = tmp_path / "run"
    folder = str(tiny_model_dir("llama", positions=1024))
    argv = ["compress", folder, "--press", "knorm", "--ratio", "0.5", "--keep-sinks", "0", "--task", "passkey"]
    assert cli.main([*argv, "--context", "128", "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, "--context 128 is too short for the passkey task")
    assert not out.exists()


@pytest.fixture
def no_weights(monkeypatch):
    """Loading a model's weights fails the test: the preflight of a cluster's run reads its header only."""

    def load(self, spec):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(LoadOptions, "load", load)


@pytest.mark.parametrize(
    "flags, needle, positions",
    [
        (["--context", "300"], "--context 300 reads 556 positions", 128),
        (["--task", "passkey", "--context", "128"], "too short for the passkey task", 1024),
        (
            ["--press", "none", "--quant", "kivi", "--bits", "2", "--context", "128"],
            "do not divide this model's head dimension 8",
            1024,
        ),
    ],
)
def test_a_clusters_run_is_refused_before_claiming_without_loading_the_weights(
    flags, needle, positions, tiny_model_dir, tmp_path, capsys, no_weights
):
    """Under a Slurm (or Ray) launcher the jobs load the model elsewhere; the preflight reads its
    config and tokenizer so the run is still refused before --out is touched (it was checked only
    inside the job, after claiming)."""
    out = tmp_path / "run"
    folder = str(tiny_model_dir("llama", positions=positions))
    argv = ["compress", folder, "--press", "knorm", *SMALL_FLAGS, *flags, "--launcher", "slurm", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 2
    one_line_error(capsys, needle)
    assert not out.exists()


def test_kivi_groups_that_do_not_divide_the_heads_are_refused_before_claiming(tiny_model_dir, tmp_path, capsys):
    """The tiny Llama's heads have 8 channels: KIVI's groups of 32 were refused only inside the job,
    after --out was claimed (run.json left "running")."""
    out = tmp_path / "run"
    argv = ["compress", str(tiny_model_dir("llama", positions=1024)), "--quant", "kivi", "--bits", "2", *SMALL_FLAGS]
    assert cli.main([*argv, "--context", "128", "--group-size", "32", "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, "give a --group-size that divides 8")
    assert not out.exists()


def test_a_job_checks_the_positions_where_it_loads_the_model(tiny_model_dir):
    """The job itself refuses too (a cluster's worker loads the model the preflight only read the
    header of, and may see another copy of it)."""
    cfg = CompressConfig(model=str(tiny_model_dir("llama")), presses=("knorm",), contexts=(300,), **SMALL)
    with pytest.raises(SinklabError, match="--context 300 reads 556 positions"):
        run_job(PressJob(cfg, "knorm"))


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--budget", "128"], "--budget is read only with --during decode: give --during decode, or leave --budget out"),
        (["--every", "32"], "--every is read only with --during decode"),
        (["--decode-tokens", "64"], "--decode-tokens is read only with --during decode"),
        (["--accuracy-test", "50"], "--accuracy-test is read only with --accuracy TASKS"),
        (["--accuracy-shots", "3"], "--accuracy-shots is read only with --accuracy TASKS"),
    ],
)
def test_a_flag_this_run_would_not_read_is_refused_naming_the_flag_that_enables_it(flags, needle, tmp_path, capsys):
    """``--budget``/``--every`` after a prefill press and ``--accuracy-test`` with no ``--accuracy``
    exited 0 having done nothing with them. Each is refused in one line before anything loads, and
    so is the notebook's keyword; given with the flag that enables it, or left out, it is read
    (the defaults are the config's). Mutation: the flags' command-line default put back to the
    config's (512, 64, ...) makes a given flag indistinguishable from none: each case exits 0."""
    out = tmp_path / "run"
    assert cli.main(["compress", "--press", "knorm", *SMALL_FLAGS, *flags, "--out", str(out), "--quiet"]) == 2
    one_line_error(capsys, needle)
    assert not out.exists()
    name = flags[0][2:].replace("-", "_")
    with pytest.raises(SinklabError, match=needle.split(":")[0]):
        sinklab.compress_model(None, **{name: int(flags[1])})


def test_flags_read_under_another_take_the_configs_defaults_when_not_given():
    """``--during decode`` alone runs at the config's budget, every and decode tokens (the command
    line's None only tells "not given" apart)."""
    from sinklab.cli.args import given_settings
    from sinklab.compress import READ_ONLY_WITH

    args = cli.build_parser().parse_args(["compress", "--press", "knorm", "--during", "decode"])
    assert (args.budget, args.every, args.decode_tokens, args.accuracy_test) == (None,) * 4
    assert given_settings(args, CompressConfig, list(READ_ONLY_WITH)) == []
    defaults = CompressConfig()
    assert (args.budget, args.every, args.decode_tokens, args.accuracy_shots, args.accuracy_test) == (
        defaults.budget, defaults.every, defaults.decode_tokens, defaults.accuracy_shots, defaults.accuracy_test
    )  # fmt: skip
    args = cli.build_parser().parse_args(["compress", "--during", "decode", "--budget", "128", "--every", "32"])
    assert given_settings(args, CompressConfig, list(READ_ONLY_WITH)) == ["budget", "every"]
    assert (args.budget, args.every) == (128, 32)
