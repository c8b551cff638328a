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
from sinklab import press as P
from sinklab.compress import CompressConfig
from sinklab.core.errors import SinklabError

#: The smallest run: one press cell or one quantizer cell, ppl on the default corpus only.
SMALL = dict(ratios=(0.5,), keep_sinks=(0,), bits=(2,), group_size=8, residual=16, tasks=("ppl",), outside=None)
SMALL_FLAGS = ["--ratio", "0.5", "--keep-sinks", "0", "--task", "ppl", "--outside-corpus", "none"]


@pytest.fixture(scope="module")
def long_model(tiny_model_dir):
    """A tiny llama trained (as its config says) on 1,024 positions: room for a 128-token context."""
    return sinklab.load_model(str(tiny_model_dir("llama", positions=1024)))


def test_a_context_past_the_models_positions_is_refused_before_the_run_directory_is_claimed(tiny_model_dir, tmp_path, capsys):
    """The tiny llama has 128 positions; a 300-token context (and the 257 tokens scored after it)
    is refused in one line, before run.json or config.json exist, by the command and by the
    notebook function. Before: the run claimed --out and ran past the positions (a 9,000-token
    context on an 8,192-position model ran for 10 minutes, run.json left "running")."""
    folder, out = str(tiny_model_dir("llama")), tmp_path / "run"
    argv = ["compress", folder, "--press", "knorm", *SMALL_FLAGS, "--context", "300", "--out", str(out), "--quiet"]
    assert cli.main(argv) == 2
    line = one_line_error(capsys, "--context 300 reads 557 positions", "has 128")
    assert "too few for sinklab compress" in line and not out.exists()
    with pytest.raises(SinklabError, match="give --context 767 or less"):
        sinklab.compress_model(
            sinklab.load_model(str(tiny_model_dir("llama", positions=1024))), presses=("knorm",), contexts=(1024,)
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
    quantizers-only run's frame() is its quantizers' rows (it was empty: they were only in
    frame("quantized"))."""
    pressed = sinklab.compress_model(long_model, presses=("knorm",), contexts=(128,), out=tmp_path / "presses", **SMALL)
    assert pressed.summary["quantizers"] == [] and pressed.summary["quantized"] == []
    assert {p.name for p in (tmp_path / "presses" / "presses").iterdir()} == {"dense.json", "knorm.json"}
    saved = json.loads((tmp_path / "presses" / "config.json").read_text())
    assert saved["presses"] == ["knorm"] and saved["quantizers"] == []
    quantized = sinklab.compress_model(long_model, quantizers=("kivi",), contexts=(128,), **SMALL)
    assert quantized.summary["presses"] == [] and quantized.summary["cells"] == []
    frame = quantized.frame()
    assert len(frame) == 1 and frame.quantizer.tolist() == ["kivi"] and frame.equals(quantized.frame("quantized"))
    assert len(pressed.frame()) == 1 and pressed.frame().press.tolist() == ["knorm"]


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
