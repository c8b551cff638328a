"""The recipe of docs/contributing/recipes/architecture.md, followed for an architecture that is
not in sinklab's layout table: one file holds the model (its config and classes, registered with
transformers' Auto classes) and its line of ``LAYOUTS``, and ``sinklab scan`` measures a saved
model of it, its attention and its FFN probes included."""

import importlib.util
import json
import sys
import textwrap

import pytest
import torch
from conftest import tiny_config
from transformers import AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from sinklab import cli
from sinklab.models.hf import LAYOUTS

#: The new file: a Llama whose FFN is called ``channel_mix`` (no "mlp", "ffn" or "feed_forward" in
#: its name, so sinklab's inferred layout finds no FFN), and its line of the layout table.
CHANNEL_MIX = textwrap.dedent(
    '''
    """ChannelMix: a decoder whose FFN module is ``channel_mix``, and where sinklab finds it."""

    from torch import nn
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, LlamaModel
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from sinklab.models.hf import LAYOUTS, Layout


    class ChannelMixConfig(LlamaConfig):
        model_type = "channel_mix"


    class ChannelMixLayer(LlamaDecoderLayer):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
            self.channel_mix = self._modules.pop("mlp")

        @property
        def mlp(self):  # what the decoder layer's forward calls
            return self.channel_mix


    class ChannelMixModel(LlamaModel):
        config_class = ChannelMixConfig

        def __init__(self, config):
            super().__init__(config)
            self.layers = nn.ModuleList(ChannelMixLayer(config, i) for i in range(config.num_hidden_layers))
            self.post_init()


    class ChannelMixForCausalLM(LlamaForCausalLM):
        config_class = ChannelMixConfig

        def __init__(self, config):
            super().__init__(config)
            self.model = ChannelMixModel(config)
            self.post_init()


    AutoConfig.register(ChannelMixConfig.model_type, ChannelMixConfig)
    AutoModelForCausalLM.register(ChannelMixConfig, ChannelMixForCausalLM)
    LAYOUTS["ChannelMixForCausalLM"] = Layout("model.layers", "channel_mix.down_proj")
    '''
)


@pytest.fixture
def channel_mix(tmp_path, monkeypatch):
    """The new file's module, imported from a folder of its own; afterwards transformers' Auto
    classes and sinklab's layout table no longer know it."""
    module = None
    try:
        path = tmp_path / "channel_mix.py"
        path.write_text(CHANNEL_MIX)
        spec = importlib.util.spec_from_file_location("channel_mix", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "channel_mix", module)
        spec.loader.exec_module(module)
        yield module
    finally:
        LAYOUTS.pop("ChannelMixForCausalLM", None)
        CONFIG_MAPPING._extra_content.pop("channel_mix", None)
        if module is not None and hasattr(module, "ChannelMixConfig"):
            MODEL_FOR_CAUSAL_LM_MAPPING._extra_content.pop(module.ChannelMixConfig, None)


def test_a_new_architecture_is_one_file_that_scan_measures(channel_mix, tokenizer, tmp_path):
    """A tiny random ChannelMix model saved as a folder: ``sinklab scan`` loads it through the Auto
    classes, names its class as a known architecture (no guessed layout), its first-token mass is
    transformers' eager attention's on the run's tokens, and its FFN probe reads ``channel_mix``:
    with the super-neuron bars at 0 the top neurons of each layer are listed with their mean |a|
    at position 0 and elsewhere, as a hook on the down projection's input measures them. Mutation
    tried: the file without its ``LAYOUTS`` line: the layout is guessed (no FFN: no super neurons,
    the architecture says so) and the test fails."""
    config = channel_mix.ChannelMixConfig(**tiny_config("llama", len(tokenizer)).to_dict())
    torch.manual_seed(0)
    model = channel_mix.ChannelMixForCausalLM(config).eval()
    children = dict(model.model.layers[0].named_children())
    assert "channel_mix" in children and "mlp" not in children
    folder, out = tmp_path / "channel-mix", tmp_path / "run"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    argv = ["scan", str(folder), "--random-tokens", "--tokens", "12", "--batch", "2", "--super-ratio", "0", "--super-min", "0"]
    assert cli.main([*argv, "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["architecture"] == "ChannelMixForCausalLM"

    loaded = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert type(loaded) is channel_mix.ChannelMixForCausalLM
    ids = torch.tensor(json.loads((out / "tokens.json").read_text())["ids"])
    inputs = {}
    hooks = [
        layer.channel_mix.down_proj.register_forward_pre_hook(lambda m, args, i=i: inputs.__setitem__(i, args[0].abs()))
        for i, layer in enumerate(loaded.model.layers)
    ]
    with torch.no_grad():
        attentions = loaded(ids, output_attentions=True).attentions
    for hook in hooks:
        hook.remove()
    mass = torch.stack([a[:, :, 1:, 0].mean(dim=(0, -1)) for a in attentions])
    torch.testing.assert_close(torch.tensor(summary["first_token_mass"]), mass, atol=1e-5, rtol=1e-4)

    found = summary["super_neurons"]
    assert sorted({n["layer"] for n in found}) == [0, 1, 2] and len(found) == 15  # the top 5 of each layer
    for neuron in found:
        a = inputs[neuron["layer"]][..., neuron["neuron"]]  # (B, T)
        assert neuron["act_first"] == pytest.approx(a[:, 0].mean().item(), rel=1e-4)
        assert neuron["act_rest_mean"] == pytest.approx(a[:, 1:].mean().item(), rel=1e-4)
        assert len(neuron["writes_to"]) == 3  # read from channel_mix.down_proj's weight
