"""The documentation site is tested like the code: its examples run, its commands parse with the
real parser, the README stays a landing page, and (integration tier, on the site ``make docs``
built) every public name and command has its reference entry and the site works offline in a
browser: search finds "SnapKV", the result opens, nothing leaves the folder."""

from __future__ import annotations

import os
import re
import runpy
import shlex
from pathlib import Path

import pytest
import torch
from browser import chromium, require_chromium, visit

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
SITE = DOCS / "_build" / "html"
SNIPPETS = DOCS / "snippets"
#: The Hub id the snippets load "your own model" from; the tests load a tiny model in its place.
SNIPPET_MODEL = "HuggingFaceTB/SmolLM2-135M"
#: Snippets on the real default model (minutes, the model's files): the integration tier.
ON_THE_DEFAULT_MODEL = ("scan_default_model.py",)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def test_every_snippet_is_included_by_a_page():
    """A snippet file no page includes is dead; a page that includes a missing one fails the build."""
    included = {m for page in pages() for m in re.findall(r"snippets/([\w.]+\.py)", page.read_text())}
    assert included == {p.name for p in SNIPPETS.glob("*.py")}


#: The pages whose Python is all tested: a Python example there is a snippet the suite runs.
TESTED_PAGES = ("guides/*.md", "quickstart.md")
#: The per-capability blocks the one ``sinklab.applied`` block replaced, and the package it removed.
REMOVED_SPELLINGS = r"\b(?:intervene|tune|kvcache)\.applied\b|\bsinklab\.press\b|\bfrom sinklab import press\b"


def test_the_guides_show_python_only_from_snippets():
    """A guide's Python example is a ``{literalinclude}`` of ``docs/snippets/``, which the test below
    runs; a fenced ``python`` block would be code no test runs."""
    fenced = [
        page.relative_to(DOCS).as_posix()
        for pattern in TESTED_PAGES
        for page in sorted(DOCS.glob(pattern))
        if re.search(r"^\s*```\s*(?:python|py|pycon|ipython)\b", page.read_text(), flags=re.M)
    ]
    assert not fenced, f"Python in a fenced block (make it a snippet under docs/snippets/): {fenced}"


def test_no_guide_or_snippet_shows_a_removed_spelling():
    """``sinklab.applied`` is the one block (docs/changes.md lists what it replaced)."""
    shown = [*(p for pattern in TESTED_PAGES for p in DOCS.glob(pattern)), *SNIPPETS.glob("*.py")]
    found = [f"{p.relative_to(DOCS).as_posix()}: {m}" for p in shown for m in re.findall(REMOVED_SPELLINGS, p.read_text())]
    assert not found, found


@pytest.fixture(scope="session")
def snippet_model_dir(tmp_path_factory, tokenizer):
    """The folder of the tiny random Llama the snippets load in place of :data:`SNIPPET_MODEL`: 3
    layers of 4 heads (2 KV heads) of dimension 32, so that KIVI's default groups of 32 channels
    divide it as they divide SmolLM2's 64, and 2,048 positions, so that the snippets' settings fit it
    as they fit the real model (a decoding press's run reads its context and 1,056 tokens more)."""
    from conftest import tiny_config
    from transformers import AutoModelForCausalLM

    from sinklab.cli import quiet

    config = tiny_config("llama", len(tokenizer), positions=2048)
    config.head_dim = 32
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    path = tmp_path_factory.mktemp("snippet-llama")
    with quiet(True):
        model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("name", sorted(p.name for p in SNIPPETS.glob("*.py") if p.name not in ON_THE_DEFAULT_MODEL))
def test_each_snippet_runs_on_a_tiny_model(name, snippet_model_dir, monkeypatch, tmp_path, capsys):
    """The page's code as written, with the Hub id swapped for a tiny saved Llama (offline), run in
    an empty folder (a snippet writes its task files and run directories there)."""
    source = (SNIPPETS / name).read_text()
    assert SNIPPET_MODEL in source or "load_model" not in source  # a snippet that trains its own model loads none
    script = tmp_path / name
    script.write_text(source.replace(SNIPPET_MODEL, str(snippet_model_dir)))
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.strip()  # each snippet prints what it shows the reader


@pytest.mark.integration
@pytest.mark.parametrize("name", ON_THE_DEFAULT_MODEL)
def test_each_default_model_snippet_runs(name, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(SNIPPETS / name), run_name="__main__")
    assert capsys.readouterr().out.strip()


def documented_commands() -> list[tuple[str, str]]:
    """Every ``sinklab ...`` line of a bash block in the docs and the README: (page, line)."""
    found = []
    for page in [*pages(), ROOT / "README.md"]:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.splitlines():
                line = line.strip()
                if line.startswith(("sinklab ", ".venv/bin/sinklab ")):
                    found.append((page.relative_to(ROOT).as_posix(), line))
    return found


def test_every_documented_command_parses_with_the_real_parser():
    """A flag renamed or removed fails here, not in a reader's terminal."""
    from sinklab.cli import build_parser

    commands = documented_commands()
    assert len(commands) > 50
    bad = []
    for page, line in commands:
        argv = shlex.split(line, comments=True)[1:]
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            bad.append(f"{page}: {line}")
    assert not bad, "\n".join(bad)


def test_the_readme_is_a_landing_page():
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= 12_000
    text = readme.decode()
    assert text.index("make demo") < text.index("make test") < 2000  # the two set-up commands first
    assert "docs/_build/html" in text and "## Cite" in text


def built_site() -> Path:
    if not (SITE / "index.html").exists():
        if os.environ.get("CI"):
            pytest.fail("`make test-integration` builds the site first (make docs)")
        pytest.skip("the site is not built: make docs")
    return SITE


@pytest.mark.integration
def test_every_public_name_and_command_has_its_reference_entry():
    import sinklab
    from sinklab.cli import build_parser
    from sinklab.intervene.interventions import INTERVENTIONS

    site = built_site()
    api = (site / "reference" / "api" / "sinklab.html").read_text()
    missing = [name for name in sinklab.__all__ if f'id="sinklab.{name}"' not in api]
    assert not missing, f"not on the API page: {missing}"
    cli = (site / "reference" / "cli.html").read_text()
    commands = build_parser()._subparsers._group_actions[0].choices
    missing = [name for name in commands if f'id="sinklab-{name}"' not in cli]
    assert not missing, f"not on the command page: {missing}"
    registries = (site / "reference" / "registries.html").read_text()
    flags = [a.option_strings[0] for a in commands["intervene"]._actions if a.dest in INTERVENTIONS]
    shown = '<code class="docutils literal notranslate"><span class="pre">{}</span>'
    missing = [flag for flag in flags if shown.format(flag) not in registries]
    assert len(flags) == len(INTERVENTIONS) and not missing, f"interventions not named by their flags: {missing}"


@pytest.mark.integration
def test_the_site_searches_and_navigates_offline():
    """Headless Chromium on the built folder: the search box finds SnapKV, the first result opens on
    a page that names it, and no page logs an error or requests anything outside the folder."""
    require_chromium()
    site = built_site()
    with chromium() as browser:
        home = visit(browser, site / "index.html")
        assert not home.problems(), home.problems()
        page = home.page
        requested = []
        page.on("request", lambda request: requested.append(request.url))
        page.fill("input[name=q]", "SnapKV")
        page.press("input[name=q]", "Enter")
        page.wait_for_selector("#search-results ul.search li a", timeout=20_000)
        results = page.locator("#search-results ul.search li a")
        assert results.count() >= 1
        results.first.click()
        page.wait_for_load_state("load")
        assert "SnapKV" in page.content()
        inside = site.resolve().as_uri()
        assert page.url.startswith(inside)
        assert not home.problems(), home.problems()
        assert requested and all(url.startswith(inside) for url in requested), [u for u in requested if not u.startswith(inside)]
