"""The recipe of docs/contributing/recipes/metric.md, followed: a new metric is one file (an
``@entry("key")`` function over the scan's record), and ``sinklab scan`` writes it to summary.json."""

import importlib.util
import json
import shutil
import sys
import textwrap

import torch
from transformers import AutoModelForCausalLM

from sinklab import cli
from sinklab.core import schemas
from sinklab.scan import SUMMARY_ENTRIES

#: The new file, as a contributor would write it: each head's mean attention on a query's own key.
SELF_MASS = textwrap.dedent(
    '''
    """``self_mass``: per (layer, head), the mean weight a query puts on its own key, over the
    queries after the first (which can only see itself), averaged over the sequences."""

    from sinklab.scan.summary import entry


    @entry("self_mass")
    def self_mass(c):
        return c.record.own[..., 1:].mean(-1).tolist()  # own: (L, H, T), A[k, k] per key k
    '''
)


def test_a_new_metric_is_one_file_that_scan_writes_to_its_summary(tmp_path, tiny_model_dir, monkeypatch):
    """Registered from its own folder, ``self_mass`` is in ``sinklab scan``'s summary.json after
    the built-in entries, one value per (layer, head), each the mean of the diagonal of that head's
    attention computed directly with transformers' eager attention on the run's own token ids.
    Mutation tried: the entry reading ``c.record.own[..., :1]`` (the first query, always 1)
    instead of the later ones fails the comparison. The scan schema takes the registered entries as
    keys, so the summary with the new key validates as it is (the run is removed afterwards: once
    the entry is unregistered, the suite's closing schema check would not know the key)."""
    out = tmp_path / "run"
    try:
        path = tmp_path / "self_mass.py"
        path.write_text(SELF_MASS)
        spec = importlib.util.spec_from_file_location("self_mass", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "self_mass", module)
        spec.loader.exec_module(module)  # registers it
        assert list(SUMMARY_ENTRIES)[-1] == "self_mass"

        folder = str(tiny_model_dir("llama"))
        argv = ["scan", folder, "--random-tokens", "--tokens", "12", "--batch", "2", "--out", str(out), "--quiet"]
        assert cli.main(argv) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert list(summary).index("self_mass") > list(summary).index("first_token_mass")
        schemas.validate(summary)

        ids = torch.tensor(json.loads((out / "tokens.json").read_text())["ids"])
        assert ids.shape == (2, 12)
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
        with torch.no_grad():
            attentions = model(ids, output_attentions=True).attentions  # per layer (B, H, T, T)
        expected = torch.stack([a.diagonal(dim1=-2, dim2=-1)[..., 1:].mean(dim=(0, -1)) for a in attentions])
        found = torch.tensor(summary["self_mass"])
        assert found.shape == (3, 4)  # the tiny llama's layers and heads
        torch.testing.assert_close(found, expected.float(), atol=1e-5, rtol=1e-4)
        assert 0.05 < found.min() and found.max() < 0.95  # a real mixture, not a degenerate constant
    finally:
        SUMMARY_ENTRIES.pop("self_mass", None)
        shutil.rmtree(out, ignore_errors=True)  # its key leaves the schema with the entry
