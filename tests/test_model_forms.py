"""Every notebook function takes the model in every form a user holds it: a transformers model with
its tokenizer, what ``sinklab.load_model`` returns, and the model's name (a folder here; a .gguf file
or a Hub id go the same way), and measures the same numbers from each.

The objects are edited in memory (their attention sharpened) and the folder the name form reads
holds the edited weights, while the objects' own recorded path holds the original ones: a function
that reloaded an object by its name, or ignored it, would measure the original model and differ.
Mutations tried: ``bench_models`` refusing model objects again fails its two object forms; the
notebook functions refusing a name (``Subject.from_model`` on a string) fails every name form;
``_run``, ``scan_models`` or ``bench_models`` reloading an object by its name fail the object forms."""

import pytest
import torch
from conftest import write_task
from transformers import AutoModelForCausalLM, AutoTokenizer

import sinklab
from sinklab.core.errors import SinklabError
from sinklab.intervene import MaskSelf


def one(given: tuple):
    """A model as one item of a sequence of models: a (model, tokenizer) pair, or the thing itself."""
    return given if len(given) == 2 else given[0]


TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 3
#: Each notebook function on cheap settings, given a model form (its leading arguments).
CALLS = {
    "scan_model": lambda m, tmp: sinklab.scan_model(*m, prompt=TEXT, tokens=24),
    "scan_models": lambda m, tmp: sinklab.scan_models({"a": one(m), "b": one(m)}, prompt=TEXT, tokens=24),
    "intervene_model": lambda m, tmp: sinklab.intervene_model(*m, interventions=[MaskSelf(5)], prompt=TEXT, tokens=24),
    "stream_model": lambda m, tmp: sinklab.stream_model(
        *m, tokens=40, sinks=2, window=14, chunk=20, latency_steps=1, policies=("dense", "sink")
    ),
    "adapt_model": lambda m, tmp: sinklab.adapt_model(*m, tokens=16, windows=1, calibration=1, schemes=("w8a8",)),
    "compress_model": lambda m, tmp: sinklab.compress_model(
        *m, presses=("knorm",), ratios=(0.5,), keep_sinks=(1,), quantizers=(), contexts=(128,), tasks=("ppl",), outside=None
    ),
    "tune_model": lambda m, tmp: sinklab.tune_model(*m, tasks=(str(write_task(tmp / "t" / "task.json")),), validation=6, test=8),
    "bench_models": lambda m, tmp: sinklab.bench_models([one(m)], tasks=("first_token_mass",), limit="quick"),
}
FORMS = ("transformers", "loaded", "name")
#: Columns that time the run, or say how the model was given, rather than measure it.
NOT_MEASURED = ("model", "label", "device", "dtype", "ms_per_token", "tokens_per_s", "wall_s", "peak_mb")


def sharpened(model):
    """The model with every query projection scaled up (sharper attention, a different model)."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(4.0)
    return model.eval()


@pytest.fixture(scope="module")
def forms(tiny_model_dir, tmp_path_factory):
    original = str(tiny_model_dir("llama", positions=1024))
    edited = tmp_path_factory.mktemp("edited") / "tiny"
    sharpened(AutoModelForCausalLM.from_pretrained(original)).save_pretrained(edited)
    AutoTokenizer.from_pretrained(original).save_pretrained(edited)
    loaded = sinklab.load_model(original)
    sharpened(loaded.model)
    pair = (sharpened(AutoModelForCausalLM.from_pretrained(original)), AutoTokenizer.from_pretrained(original))
    return {"transformers": pair, "loaded": (loaded,), "name": (str(edited),)}


def measured(result):
    table = result.frame("metrics") if result.kind == "bench" else result.frame()
    return table.drop(columns=[c for c in table.columns if c in NOT_MEASURED]).reset_index(drop=True)


@pytest.mark.parametrize("function", sorted(CALLS))
def test_every_notebook_function_takes_every_model_form(function, forms, tmp_path):
    tables = {form: measured(CALLS[function](forms[form], tmp_path / form)) for form in FORMS}
    assert len(tables["name"]) > 0
    for form in ("transformers", "loaded"):
        assert tables[form].equals(tables["name"]) or tables[form].compare(tables["name"]).empty, form


def test_interventions_may_follow_a_loaded_model_positionally(forms):
    """``intervene_model(lm, [MaskSelf(10)])``: a LoadedModel brings its tokenizer, so the list in
    the tokenizer's place is the interventions (it failed with "name at least one intervention")."""
    (loaded,) = forms["loaded"]
    by_keyword = sinklab.intervene_model(loaded, interventions=[MaskSelf(5)], prompt=TEXT, tokens=24)
    positional = sinklab.intervene_model(loaded, [MaskSelf(5)], prompt=TEXT, tokens=24)
    assert measured(positional).equals(measured(by_keyword)) and set(positional.frame().experiment) == {"mask_self k=5"}


def test_loading_settings_beside_a_model_object_are_refused(forms):
    """``bench_models([lm], dtype="bfloat16")`` ran at float32 and recorded bfloat16; with a model
    object, how to load a model is refused in one line, as ``scan_model`` refuses it."""
    (loaded,) = forms["loaded"]
    with pytest.raises(SinklabError, match="^bench_models: dtype say how to load a model"):
        sinklab.bench_models([loaded], tasks=("first_token_mass",), limit="quick", dtype="bfloat16")
    with pytest.raises(SinklabError, match="^scan_models: dtype say how to load a model"):
        sinklab.scan_models({"a": loaded, "b": forms["name"][0]}, prompt=TEXT, tokens=24, dtype="bfloat16")
