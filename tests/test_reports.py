"""Every capability's report.html, opened in headless Chromium: it loads with no console error and
no network request, every plot draws, clicking a first-token-mass cell shows that head's map, and a
token made of markup shows as text and runs nothing (the markup model's BOS is that token, so the
scan and sink-prefix pages show it whatever the scan or the prefix search picks)."""

import json

import pytest
import torch
from browser import chromium, click_heatmap_cell, layout_problems, require_chromium, visit
from conftest import make_tokenizer, tiny_config
from transformers import AutoModelForCausalLM

from sinklab import cli
from sinklab.core import pipeline
from sinklab.core.attention import AttentionSpec
from sinklab.pretrain import PretrainConfig, train_lm
from sinklab.trigger import CONSTRUCT, ConstructConfig, TriggerConfig, TriggerTask, paper_configs, run_lab

MARKUP = "</script><script>alert(1)</script>"


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium; its absence skips a test, except on CI, which must run them."""
    require_chromium()
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def markup_model(tmp_path_factory):
    """A tiny Llama whose BOS token is made of markup: every scan and every sink prefix starts with it."""
    tokenizer = make_tokenizer()
    tokenizer.add_special_tokens({"bos_token": MARKUP})
    config = tiny_config("llama", len(tokenizer))
    config.bos_token_id = tokenizer.bos_token_id
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    path = tmp_path_factory.mktemp("markup-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def check_page(browser, report, screenshots, min_plots=1):
    assert report.exists(), f"{report} was not written"
    seen = visit(browser, report)
    assert seen.problems() == []
    assert seen.unrendered_plots() == []
    assert layout_problems(seen.page) == []
    assert seen.page.evaluate("document.querySelectorAll('.plot').length") >= min_plots
    seen.page.screenshot(path=str(screenshots / f"{report.parent.name}.png"), full_page=True)
    return seen


def test_scan_report_click_and_escaping(markup_model, browser, tmp_path):
    prompt = f"To be, or not to be {MARKUP} that is the question: whether 'tis nobler in the mind to suffer"
    assert cli.main(["scan", str(markup_model), "--prompt", prompt, "--out", str(tmp_path / "scan")]) == 0
    seen = check_page(browser, tmp_path / "scan" / "report.html", tmp_path)
    page = seen.page
    mass_id = page.evaluate("document.querySelector('[id$=\"-mass\"]').id")
    map_id = mass_id.replace("-mass", "-map")
    click_heatmap_cell(page, mass_id, 2, 1)  # head 2 of layer 1
    assert page.evaluate(f"document.getElementById('{map_id}').layout.title.text").startswith("layer 1, head 2")
    click_heatmap_cell(page, mass_id, 0, 2)
    assert page.evaluate(f"document.getElementById('{map_id}').layout.title.text").startswith("layer 2, head 0")
    ticks = page.evaluate(f"Array.from(document.querySelectorAll('#{map_id} .xtick text')).map(t => t.textContent)")
    assert any(MARKUP[:20] in t for t in ticks), (
        "the markup token is not shown literally on the map's axis (labels are cut at 24 characters)"
    )
    assert MARKUP in page.inner_text("body")  # the token table shows it whole
    written = (tmp_path / "scan" / "report.html").read_text()
    assert page.evaluate("document.querySelectorAll('script').length") == written.count("<script>")  # the token added no element
    assert seen.dialogs == []


def test_trigger_lab_report_with_seed_selector(browser, tmp_path):
    configs = paper_configs([0, 1], TriggerConfig(max_steps=20, eval_sequences=50), shapes=[(1, 1)])
    run_lab(configs, tmp_path / "trigger", workers=1)
    seen = check_page(browser, tmp_path / "trigger" / "report.html", tmp_path)
    select = seen.page.locator("select").first
    select.select_option(label="seed 1")
    seen.page.wait_for_timeout(200)
    assert seen.unrendered_plots() == [] and seen.problems() == []
    pipeline.run(CONSTRUCT, ConstructConfig(TriggerTask()), out=tmp_path / "construction")
    assert "max_abs_error" in check_page(
        browser, tmp_path / "construction" / "report.html", tmp_path, min_plots=0
    ).page.inner_text("body")


def test_intervene_report(tiny_model_dir, browser, tmp_path):
    out = tmp_path / "intervene"
    code = cli.main(
        [
            "intervene",
            str(tiny_model_dir("llama")),
            "--random-tokens",
            "--max-tokens",
            "16",
            "--batch",
            "2",
            "--mask-self",
            "5",
            "--amplify",
            "5",
            "--lam",
            "1,4",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    check_page(browser, out / "report.html", tmp_path)


def test_pretrain_reports_and_runs_side_by_side(browser, tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"doc{i}.txt").write_text(("the quick brown fox jumps over the lazy dog " * 300) + str(i))
    runs = []
    for attn in ("softmax", "relu"):
        out = tmp_path / attn
        train_lm(
            PretrainConfig(
                attention=AttentionSpec(attn),
                corpus=str(corpus),
                tokenizer="bytes",
                d_model=32,
                n_layers=2,
                n_heads=2,
                seq_len=32,
                batch=4,
                steps=8,
                eval_every=4,
                eval_batches=2,
                checkpoint_every=8,
                scan_tokens=16,
                scan_batch=2,
            ),
            out,
        )
        runs.append(out)
    rows = [json.loads(line) for line in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    assert {"first_token_mass_mean", "sink_rate_value", "dominance_first_max"} <= set(rows[-1])  # sink metrics against the step
    check_page(browser, runs[0] / "report.html", tmp_path)
    both = tmp_path / "both.html"
    assert cli.main(["report", *map(str, runs), "--out", str(both)]) == 0
    seen = check_page(browser, both, tmp_path)
    legend = seen.page.evaluate("Array.from(document.querySelectorAll('.legendtext')).map(t => t.textContent)")
    assert {"softmax", "relu"} <= set(legend)


def test_stream_report(stream_run, browser, tmp_path):
    check_page(browser, stream_run / "report.html", tmp_path)


def test_a_long_scan_report_stays_small(tmp_path):
    """4,096 tokens: curves are binned, maps are not kept, the page stays under 10 MB (no browser needed)."""
    from transformers import LlamaConfig

    tokenizer = make_tokenizer()
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        vocab_size=len(tokenizer),
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert (
        cli.main(
            [
                "scan",
                str(tmp_path / "model"),
                "--random-tokens",
                "--max-tokens",
                "4096",
                "--batch",
                "2",
                "--out",
                str(tmp_path / "scan"),
            ]
        )
        == 0
    )
    size = (tmp_path / "scan" / "report.html").stat().st_size
    assert size < 10 * 2**20, f"report of a 4,096-token scan is {size / 2**20:.1f} MiB"


def test_adapt_reports(markup_model, browser, tmp_path):
    """The sink-prefix page, whose searched prefix starts with the markup BOS, and the fine-tuning
    page. Mutation caught: the key figures written without escaping (``{v}`` for ``{esc(v)}`` in
    ``html.key_figures``) ran the token's script (a dialog, one more script element); before the
    BOS was markup, the page showed the token only when the search happened to pick it."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(8):
        (corpus / f"doc{i}.txt").write_text(f"To be, or not to be {MARKUP} that is the question. " * 30)
    common = ["--corpus", str(corpus), "--tokens", "16", "--windows", "2", "--calibration", "1", "--quant", "w8a8,w8a8_static"]
    assert (
        cli.main(
            ["adapt", str(markup_model), *common, "--prefix-tokens", "1", "--candidates", "1", "--out", str(tmp_path / "prefix")]
        )
        == 0
    )
    summary = json.loads((tmp_path / "prefix" / "summary.json").read_text())
    assert summary["search"]["strings"][0] == MARKUP  # the prefix starts with BOS
    seen = check_page(browser, tmp_path / "prefix" / "report.html", tmp_path)
    assert MARKUP in seen.page.inner_text("body")
    written = (tmp_path / "prefix" / "report.html").read_text()
    assert seen.page.evaluate("document.querySelectorAll('script').length") == written.count("<script>") and seen.dialogs == []
    assert (
        cli.main(
            [
                "adapt",
                str(markup_model),
                *common,
                "--to",
                "kv_bias",
                "--steps",
                "3",
                "--seq-len",
                "12",
                "--batch",
                "2",
                "--out",
                str(tmp_path / "tune"),
            ]
        )
        == 0
    )
    check_page(browser, tmp_path / "tune" / "report.html", tmp_path, min_plots=2)


def test_scan_pages_lay_out_without_overlap_or_clipping(tiny_model_dir, browser, tmp_path):
    """The multi-model scan page and a model's own scan page at 1400 and 1920 px: no two panels
    overlap, nothing is wider than its column, and every plot (its titles, legend and ticks) fits
    its box. The models have long folder names with no place to break a line, as Hub cache paths
    do. Mutations caught: drawing each plot where its script stands (before the later columns
    narrow the grid: the by-layer plot and the heatmaps overflow); the table without its scrolling
    wrapper and the columns without ``min-width: 0`` (the models table widens its column)."""
    models = []
    for arch in ("llama", "gpt2"):
        link = tmp_path / f"tiny_{arch}_model_whose_folder_name_is_long_and_has_no_place_to_break_a_line"
        link.symlink_to(tiny_model_dir(arch))
        models.append(str(link))
    out = tmp_path / "cmp"
    assert cli.main(["scan", *models, "--random-tokens", "--tokens", "12", "--batch", "2", "--out", str(out)]) == 0
    single = next((out / "models").glob("0-*")) / "report.html"
    for report in (out / "report.html", single):
        for width in (1400, 1920):
            seen = visit(browser, report, width)
            assert seen.problems() == [] and seen.unrendered_plots() == []
            assert layout_problems(seen.page) == [], f"{report} at {width} px"
