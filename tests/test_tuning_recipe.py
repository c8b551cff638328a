"""A new tuning method is one file (docs, Contributing, "A tuning method"): the file below, written
to a folder of its own and imported, is the whole method, and ``sinklab tune --method`` profiles,
searches, judges and saves it; ``sinklab.applied`` applies it; its summary validates against the
``tune`` schema, whose method list comes from the registry.

Mutations tried: the new file's edits doing nothing (``edits`` returning ``[]``) fails the logits'
check; ``METHODS`` frozen as a tuple at import (``tuple(TUNINGS)``) refuses ``--method sharpen_all``;
the schema's method list read from the shipped file fails the validation."""

import importlib.util
import json
import shutil

import torch
from conftest import write_task
from transformers import AutoModelForCausalLM

import sinklab
from sinklab.core import schemas
from sinklab.tune import TUNINGS, load_tuning

#: The whole new method: one gamma for the initial token of every head (a one-number ZeroTuning).
NEW_METHOD = '''
from dataclasses import dataclass

import torch

from sinklab.core.hooks import hook_name
from sinklab.tune import InitialTokenScale, Tuning, register_tuning
from sinklab.tune.formulas import scale_initial


@register_tuning("sharpen_all")
@dataclass(frozen=True)
class SharpenAll(Tuning):
    """Every head's initial-token attention scaled by one gamma."""

    gamma: float
    layers: int
    heads: int

    help = "sharpen_all: one gamma on every head's initial token"
    strength_label = "log gamma on every head's initial token"

    @classmethod
    def untouched(cls, layers, heads):
        return cls(1.0, layers, heads)

    @property
    def scaled(self):
        return 0 if self.gamma == 1.0 else self.layers * self.heads

    def edits(self):
        if self.gamma == 1.0:
            return []
        return [InitialTokenScale((self.gamma,) * self.heads, layers=(layer,)) for layer in range(self.layers)]

    @classmethod
    def strength_hooks(cls, strength, options):
        return [
            (hook_name(layer, "attn.hook_scores"), lambda scores, where, s=strength[layer]: scale_initial(scores, s))
            for layer in range(strength.shape[0])
        ]

    @classmethod
    def candidates(cls, profile, options):
        layers, heads = profile.shape
        return [(f"gamma {g:g} everywhere", cls(g, layers, heads)) for g in (0.5, 2.0)]
'''


def test_a_new_tuning_method_is_one_file_that_tune_and_applied_run(tmp_path, tiny_model_dir):
    source = tmp_path / "sharpen_all.py"
    source.write_text(NEW_METHOD)
    spec = importlib.util.spec_from_file_location("sharpen_all", source)
    module = importlib.util.module_from_spec(spec)
    out = tmp_path / "run"
    try:
        spec.loader.exec_module(module)  # registers it
        folder = str(tiny_model_dir("llama"))
        task = write_task(tmp_path / "tiny" / "task.json")
        flags = ["--method", "sharpen_all", "--tasks", str(task), "--validation", "6", "--test", "8", "--out", str(out)]
        assert sinklab.cli.main(["tune", folder, *flags, "--quiet"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        schemas.validate(summary)
        assert summary["method"] == "sharpen_all"
        tried = [row["label"] for row in summary["tasks"][0]["validation"]]
        assert tried == ["untouched", "gamma 0.5 everywhere", "gamma 2 everywhere"]
        assert isinstance(load_tuning(out / "tuning-tiny.json"), module.SharpenAll)

        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        ids = torch.arange(2, 14).unsqueeze(0)
        with torch.no_grad():
            untouched = model(ids).logits
            with sinklab.applied(model, module.SharpenAll(2.0, 3, 4)):
                sharpened = model(ids).logits
            with sinklab.applied(model, module.SharpenAll.untouched(3, 4)):
                assert torch.equal(model(ids).logits, untouched)
        assert (sharpened - untouched).abs().max() > 1e-3
    finally:
        TUNINGS.pop("sharpen_all", None)
        shutil.rmtree(out, ignore_errors=True)  # validated above; the suite's closing check no longer knows the method
