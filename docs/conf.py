"""Sphinx configuration of sinklab's documentation site (``make docs``: the site in docs/_build/html,
read offline; every warning is an error, and CI builds it before the integration tests).

Offline in every part: the theme (Furo) ships its own files and uses the system's fonts, maths is
rendered by the MathJax copy that ``sphinx-mathjax-offline`` bundles, no intersphinx inventory is
fetched (references to torch or transformers are plain text), and the command-line and registry
pages are generated from the code itself (``_ext/sinklab_docs.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))

import sinklab  # noqa: E402

project = "sinklab"
author = "the sinklab developers"
copyright = "2026, " + author
release = version = sinklab.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "sinklab_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_member_order = "bysource"
add_module_names = False

#: Every cross-reference must resolve, except those into libraries whose inventories the offline
#: build cannot fetch (their names stay plain text).
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(torch|transformers|numpy|np|pandas|pd|plotly|go|argparse|pathlib|os|collections|typing|"
        r"typing_extensions|concurrent|contextlib|dataclasses|enum|abc|tqdm|lm_eval|accelerate|safetensors|"
        r"datetime|json|io|re|subprocess|types|functools|itertools|numbers|logging|random|scipy|jsonschema|"
        r"submitit|ray|gguf|tokenizers|huggingface_hub|nn|inspect|weakref|platform)(\..*)?",
    ),
    ("py:class", r"Module"),  # torch.nn.Module as its subclasses' bases show it
    ("py:.*", r"(.*\.)?_[A-Za-z]\w*"),  # a private name: not documented, by design
    ("py:class", r"'.*"),  # a dataclass's generated signature quotes its annotations, which Sphinx splits at commas
]
#: "more than one target found": a class documented where its package exports it is also
#: registered under the module that defines it (autodoc's canonical name); both are one object.
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = f"sinklab {release}"
html_static_path = []
html_show_sourcelink = False
#: Search result summaries are fetched from each page, which a browser refuses for files opened
#: from disk (a console error per result): the offline site lists results without them.
html_show_search_summary = False
