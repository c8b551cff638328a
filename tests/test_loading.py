"""Loading models, and refusing what sinklab cannot measure: bidirectional (BERT-like) models on
every path that instruments one, mistyped folder names read as Hub ids (one line, no retries), and
the dtype a folder loads in."""

import json
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch
from conftest import one_line_error, tiny_config

from sinklab import applied, cli
from sinklab.core.errors import SinklabError
from sinklab.core.hooks import HookSet
from sinklab.models.hf import LoadedModel, check_causal, instrument, load_model, model_facts
from sinklab.models.hf.hub import hub_files_only_local
from sinklab.models.hf.instrument import sinklab_attention
from sinklab.models.subjects import Subject

NOT_CAUSAL = "does not attend causally"


def tiny_bert(cls_name: str, **overrides):
    """A tiny random BERT-family model (eval mode) of the class ``cls_name``, in the style of ``tiny_config``."""
    import transformers

    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=128)
    config = transformers.BertConfig(vocab_size=300, pad_token_id=1, **sizes, **overrides)
    torch.manual_seed(0)
    return getattr(transformers, cls_name)(config).eval()


BIDIRECTIONAL = ("BertForMaskedLM", "BertLMHeadModel", "BertModel")  # BertLMHeadModel with is_decoder=False (its default)


@pytest.mark.parametrize("cls_name", BIDIRECTIONAL)
def test_a_bidirectional_model_object_is_refused_by_every_entry_point(cls_name, tokenizer):
    """Before: scanned and edited under a causal mask sinklab imposed (exit 0), ``applied(bert, [])``
    changed its logits (by 3.5e-3 here), ``BertModel`` ended in a TypeError. Mutations tried:
    ``check_causal`` taking ``is_causal=False`` for causal (failed: the models were refused for their
    head, or not at all), and ``LoadedModel`` without its ``__post_init__`` check (the LoadedModel
    line failed)."""
    model = tiny_bert(cls_name)
    ids = torch.randint(2, 300, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(input_ids=ids)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before a layout is guessed and warned about
        for refused in (lambda: Subject.from_model(model, tokenizer), lambda: LoadedModel(model, tokenizer, "bert", "object")):
            with pytest.raises(SinklabError, match=rf"{cls_name}\)? {NOT_CAUSAL}.*is_causal=False.*is_decoder=False"):
                refused()
        with pytest.raises(SinklabError, match=NOT_CAUSAL), torch.no_grad(), applied(model, []):
            model(input_ids=ids)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids)[0], before, rtol=0, atol=0)  # nothing was left on the model


def test_instrumenting_a_bidirectional_model_is_refused_before_anything_changes():
    """The scan, intervene, stream and adapt paths all enter ``instrument()``, which refuses on entry.
    Mutation tried: the ``check_causal`` call removed from ``instrument()`` (no error raised)."""
    model = tiny_bert("BertForMaskedLM")
    previous = model.config._attn_implementation
    with pytest.raises(SinklabError, match=NOT_CAUSAL), instrument(model, HookSet()):
        pass
    assert model.config._attn_implementation == previous


def test_a_call_without_a_mask_gets_the_visibility_it_asks_for(tokenizer):
    """A call with no mask is causal only where the call or the module says so (as transformers'
    SDPA reads it); one that means full attention is refused instead of masked. Mutation tried:
    always imposing the causal mask (the old code: both refusals failed)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("llama", len(tokenizer))).eval()
    attention = model.model.layers[0].self_attn
    q = k = v = torch.randn(1, 4, 5, 8, generator=torch.Generator().manual_seed(3))
    with instrument(model, HookSet()):
        unmasked, _ = sinklab_attention(attention, q, k, v, None, scaling=1.0)
        causal, _ = sinklab_attention(attention, q, k, v, torch.ones(5, 5, dtype=torch.bool).tril()[None, None], scaling=1.0)
        torch.testing.assert_close(unmasked, causal)
        with pytest.raises(SinklabError, match="is_causal=False"):
            sinklab_attention(attention, q, k, v, None, scaling=1.0, is_causal=False)
        attention.is_causal = False
        try:
            with pytest.raises(SinklabError, match="is_causal=False"):
                sinklab_attention(attention, q, k, v, None, scaling=1.0)
        finally:
            attention.is_causal = True


def test_a_model_that_does_not_say_it_is_causal_is_refused_until_its_config_does(tokenizer):
    """The generic fallback: no attention module carries ``is_causal``, so the config's
    ``is_decoder`` decides. Mutation tried: taking silence for causal (no error raised)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_config(tiny_config("llama", len(tokenizer)))
    for layer in model.model.layers:
        del layer.self_attn.is_causal
    with pytest.raises(SinklabError, match="does not say whether it attends causally"):
        check_causal(model)
    model.config.is_decoder = True
    check_causal(model)


def test_a_causal_bert_is_measured_without_a_mask_of_sinklab_s_own():
    """``BertLMHeadModel(is_decoder=True)`` attends causally: ``applied`` with no edits leaves its
    logits as they were (within float32 rounding), but scanning it is refused, its head being more
    than an output layer (sinklab's next-token loss would be 0.29 nats off here). Mutation tried:
    the head check removed (``from_model`` accepted it)."""
    model = tiny_bert("BertLMHeadModel", is_decoder=True)
    ids = torch.randint(2, 300, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(input_ids=ids).logits
        with pytest.warns(UserWarning, match="layout table"), applied(model, []):
            during = model(input_ids=ids).logits
    torch.testing.assert_close(during, before, atol=1e-6, rtol=1e-5)
    with pytest.raises(SinklabError, match="its head cls does more than its output layer cls.predictions.decoder"):
        Subject.from_model(model, object())


def test_a_base_model_without_a_head_is_refused(tokenizer):
    """``LlamaModel`` (no LM head) ended in ``TypeError: 'NoneType' object is not callable`` in the
    scan's loss. Mutation tried: the no-head check removed (failed: a StopIteration from the next check)."""
    import transformers

    with pytest.raises(SinklabError, match="LlamaModel has no language-model head"):
        Subject.from_model(transformers.LlamaModel(tiny_config("llama", len(tokenizer))), tokenizer)


@pytest.fixture(scope="module")
def bert_folders(tmp_path_factory, tokenizer):
    """Saved BERT folders: a masked LM (AutoModelForCausalLM makes it a BertLMHeadModel with
    is_decoder=False) and a causal BertLMHeadModel."""
    folders = {}
    for name, cls_name, overrides in (("masked", "BertForMaskedLM", {}), ("causal", "BertLMHeadModel", {"is_decoder": True})):
        folders[name] = tmp_path_factory.mktemp(f"bert-{name}")
        tiny_bert(cls_name, **overrides).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


def test_the_cli_refuses_a_bert_folder_in_one_line(bert_folders, tmp_path, capsys):
    """Before: ``sinklab scan`` on a BERT folder scanned it under an imposed causal mask and exited 0.
    Mutations tried: ``check_causal`` taking ``is_causal=False`` for causal (failed: the masked-LM
    folder was refused for its head, not its attention), and the ``check_supported`` call removed
    from loading (failed: the causal folder loaded and scanned, exit 0)."""
    assert cli.main(["scan", str(bert_folders["masked"]), "--out", str(tmp_path / "masked")]) == 2
    one_line_error(capsys, f"{bert_folders['masked']} (BertLMHeadModel) {NOT_CAUSAL}", "is_decoder=False")
    assert cli.main(["scan", str(bert_folders["causal"]), "--out", str(tmp_path / "causal")]) == 2
    one_line_error(capsys, "its head cls does more than its output layer")
    assert not (tmp_path / "masked" / "summary.json").exists() and not (tmp_path / "causal" / "summary.json").exists()


def test_a_mistyped_folder_offline_fails_at_once_naming_both_readings(tmp_path, monkeypatch, capsys):
    """``sinklab scan my-model-dir`` (no such folder, HF_HUB_OFFLINE=1 as in every test) names the
    folder and the Hub id in one line. Mutation tried: no question to the Hub (straight to
    transformers, as before: its message names neither reading)."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["scan", "my-model-dir"]) == 2
    one_line_error(
        capsys,
        "no such folder ./my-model-dir, and no Hub model 'my-model-dir' in the local Hugging Face cache",
        "HF_HUB_OFFLINE is set",
    )


class _FakeHub(BaseHTTPRequestHandler):
    """Answers ``model_info`` as the Hub does: 200 for the models it holds, 404 RepoNotFound otherwise."""

    models = {"gpt2", "org/model"}

    def do_GET(self):  # noqa: N802 - the http.server name
        repo = self.path.split("?")[0].removeprefix("/api/models/").split("/revision/")[0]
        found = repo in self.models
        body = json.dumps({"id": repo, "sha": "0" * 40} if found else {"error": "Repository not found"}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        if not found:
            self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def online(monkeypatch):
    """The Hub as reachable, served by :class:`_FakeHub` on localhost (tests never use the network)."""
    from huggingface_hub import constants

    server = HTTPServer(("127.0.0.1", 0), _FakeHub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    yield
    server.shutdown()
    server.server_close()


def test_hub_ids_the_hub_answers_for_go_to_transformers_and_others_fail_in_one_line(online):
    """A single name such as ``gpt2`` stays a Hub id when the Hub has it (transformers then loads it
    online); one the Hub does not have fails at once. Mutation tried: taking a RepoNotFound answer
    for an unreachable Hub (failed: the message named the cache, not the Hub's answer)."""
    assert hub_files_only_local("gpt2", None) is False
    assert hub_files_only_local("org/model", "main") is False
    not_on_the_hub = r"no such folder \./my-model-dir, and the Hugging Face Hub has no model 'my-model-dir' \(or it is private"
    with pytest.raises(SinklabError, match=not_on_the_hub):
        load_model("my-model-dir")
    with pytest.raises(SinklabError, match=r"no such folder \./my model dir \(and 'my model dir' is not a Hub model id\)"):
        load_model("my model dir")


@pytest.fixture
def unreachable(monkeypatch, tmp_path):
    """The Hub not offline but unreachable: nothing listens on the endpoint's port; an empty cache."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as probe:  # a port that was free a moment ago: connections are refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return tmp_path / "hub-cache"


def test_an_unreachable_hub_fails_at_once_or_loads_the_cached_copy_with_a_warning(unreachable, tiny_model_dir, monkeypatch):
    """Before: 30 s of retries and 12 lines. Now one question to the Hub and one line;
    a model the cache holds loads from it, warned about (the cached copy may be older), and without
    a warning when HF_HUB_OFFLINE asked for it. Mutations tried: no question to the Hub (failed,
    after retries), the cache not consulted (failed: the cached model refused), no warning (failed),
    a warning also under HF_HUB_OFFLINE (failed)."""
    start = time.perf_counter()
    missing = r"no such folder \./nobody/nothing, and no Hub model 'nobody/nothing' .* \(the Hub is unreachable: \w+"
    with pytest.raises(SinklabError, match=missing):
        load_model("nobody/nothing")
    assert time.perf_counter() - start < 5
    snapshot = unreachable / "models--tiny--llama" / "snapshots" / ("1" * 40)
    snapshot.mkdir(parents=True)
    for file in tiny_model_dir("llama").iterdir():
        (snapshot / file.name).symlink_to(file)
    (unreachable / "models--tiny--llama" / "refs").mkdir()
    (unreachable / "models--tiny--llama" / "refs" / "main").write_text("1" * 40)
    with pytest.warns(UserWarning, match="the Hub is unreachable.*loading 'tiny/llama' from the local Hugging Face cache"):
        loaded = load_model("tiny/llama")
    assert (loaded.source, type(loaded.model).__name__) == ("hub", "LlamaForCausalLM")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_model("tiny/llama").source == "hub"


@pytest.fixture(scope="module")
def bfloat16_folder(tmp_path_factory, tokenizer):
    """A tiny Llama saved in bfloat16, so that a load that ignores ``dtype`` keeps bfloat16."""
    import transformers

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-bf16")
    transformers.AutoModelForCausalLM.from_config(tiny_config("llama", len(tokenizer))).to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


ASKED_AND_LOADED = [
    ("auto", torch.float32),
    ("float32", torch.float32),
    ("bfloat16", torch.bfloat16),
    (torch.bfloat16, torch.bfloat16),
]


@pytest.mark.parametrize("asked, expected", ASKED_AND_LOADED)
def test_a_folder_loads_in_the_dtype_asked_for(bfloat16_folder, asked, expected):
    """``auto`` is float32 on a CPU (not the checkpoint's bfloat16); a named dtype is that dtype.
    The slow default-model test caught this alone, in minutes. Mutations tried: ``auto`` resolved to
    the checkpoint's dtype on a CPU (the auto case failed), ``bfloat16`` mapped to float32 in
    ``DTYPES`` (the bfloat16 string case failed), the resolved dtype not passed to transformers
    (auto and float32 failed: the checkpoint's bfloat16 came back)."""
    loaded = load_model(str(bfloat16_folder), dtype=asked, device="cpu")
    assert {p.dtype for p in loaded.model.parameters()} == {expected}
    assert model_facts(loaded.model)["dtype"] == str(expected).removeprefix("torch.")


def test_a_gguf_installed_elsewhere_finds_its_dequantised_folder_and_a_changed_one_gets_its_own(tmp_path, monkeypatch):
    """The folder is named by the GGUF's bytes: the same wheel in another environment or clone
    reuses it (dequantising takes about a minute), another file does not. Mutations tried: the
    former key (path, size and modification time) dequantises the copy again; hashing the first
    chunk only misses the changed byte."""
    import os

    from sinklab.models.hf import dequantise

    monkeypatch.setenv("SINKLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(dequantise, "_HASH_CHUNK", 16)  # the change below lies past the first chunk
    built = []

    def fake_dequantise(path, target):
        built.append(path)
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(dequantise, "_dequantise_to", fake_dequantise)
    here, elsewhere = tmp_path / "env1" / "m.gguf", tmp_path / "env2" / "m.gguf"
    for path in (here, elsewhere):
        path.parent.mkdir()
        path.write_bytes(b"GGUF" + bytes(64))
    assert dequantise.dequantised_dir(here) == dequantise.dequantised_dir(elsewhere) and built == [here]
    elsewhere.write_bytes(b"GGUF" + bytes(63) + b"x")  # the same size
    os.utime(elsewhere, ns=(1, 1))  # a changed file shows a changed modification time
    assert dequantise.dequantised_dir(elsewhere) != dequantise.dequantised_dir(here) and built == [here, elsewhere]


def test_processes_that_ask_for_the_same_gguf_at_once_dequantise_it_once(tmp_path, monkeypatch):
    """Two callers at once (as a pool's jobs on a fresh cache): the second waits for the first's
    folder. Mutation tried: without the lock both dequantise."""
    from concurrent.futures import ThreadPoolExecutor

    from sinklab.models.hf import dequantise

    monkeypatch.setenv("SINKLAB_CACHE", str(tmp_path / "cache"))
    built = []

    def slow_dequantise(path, target):
        built.append(path)
        time.sleep(0.5)
        target.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(dequantise, "_dequantise_to", slow_dequantise)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: dequantise.dequantised_dir(gguf), range(2)))
    assert folders[0] == folders[1] and len(built) == 1
