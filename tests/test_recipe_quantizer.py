"""The recipe of docs/contributing/recipes/quantizer.md, followed through the command: a new
quantizer is one file (a frozen dataclass ``Quantizer`` with ``@register_policy`` and a store),
and ``sinklab compress --quant`` runs it with and without the sink protected, as
``sinklab.applied`` does.

``test_a_new_quantizer_is_one_class_the_registry_command_and_block_all_take``
(tests/test_kvcache_policy.py) checks the configuration the command builds for a new quantizer
(its cells from ``--bits`` and ``--keep-sinks``) and the block, but does not run the command;
this test does."""

import importlib.util
import json
import sys
import textwrap

import pytest
import torch

import sinklab
from sinklab import cli
from sinklab.kvcache import POLICIES, QUANTIZERS

#: The new file, as a contributor would write it: symmetric INT8 with one scale per token and head.
ABSMAX8 = textwrap.dedent(
    '''
    """``absmax8``: symmetric INT8, one float16 scale (the largest |entry| / 127) per token, KV head
    and keys or values; the first ``protect`` tokens in full precision."""

    import copy
    from dataclasses import dataclass

    import torch

    from sinklab.kvcache import Quantizer, register_policy


    def quantized(x):
        scale = (x.float().abs().amax(-1, keepdim=True) / 127).clamp(min=1e-8).half()
        return (x.float() / scale.float()).round().clamp(-127, 127).to(torch.int8), scale


    class AbsmaxStore:
        """One layer's quantized tokens: (int8 keys, their scales, int8 values, their scales) per absorb."""

        def __init__(self):
            self.parts = []

        def absorb(self, keys, values, end=None):
            if keys.shape[2]:
                self.parts.append((*quantized(keys), *quantized(values)))
            return keys[:, :, :0], values[:, :, :0]  # nothing stays in full precision

        @property
        def length(self):
            return sum(part[0].shape[2] for part in self.parts)

        def dequantize_into(self, keys, values):
            for out, (q, s) in ((keys, (0, 1)), (values, (2, 3))):
                if self.parts:
                    ints = torch.cat([part[q] for part in self.parts], 2).float()
                    scales = torch.cat([part[s] for part in self.parts], 2).float()
                    out.copy_(ints * scales)

        def tensors(self):
            return [t for part in self.parts for t in part]

        def branched(self):
            twin = copy.copy(self)
            twin.parts = list(self.parts)
            return twin


    @register_policy("absmax8")
    @dataclass(frozen=True)
    class Absmax8(Quantizer):
        """Absmax8: symmetric INT8 with a scale per token and KV head; protect the first N tokens."""

        bits: int = 8
        bit_widths = (8,)
        protects = "first"

        def make_store(self, layer, protected):
            return AbsmaxStore()
    '''
)

CONTEXT = 40
#: Bytes per token and KV head of the tiny float32 llama (8 channels): 32 dense, 8 + 2 (a float16 scale) in INT8.
INT8_SHARE = (8 + 2) / 32


def test_a_new_quantizer_is_one_file_that_compress_runs_and_applied_takes(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """Registered from its own folder, ``absmax8`` is a quantizer of the registry with its bit width
    and protect rule in ``--quant``'s catalogue; ``sinklab compress --quant absmax8 --keep-sinks 0,1``
    gives it two rows (table and summary), each storing the cache in 10 of its 32 bytes per token,
    and the protected row the first token's 32; the text after the context keeps the dense
    cache's perplexity to 1e-4. Under ``sinklab.applied`` the protected first token is the dense cache's,
    bit for bit, and every other key and value comes back within half its token's step.
    Mutation tried: the file's ``dequantize_into`` writing the integers without their scales fails
    the perplexity and the half-step check."""
    try:
        path = tmp_path / "absmax8.py"
        path.write_text(ABSMAX8)
        spec = importlib.util.spec_from_file_location("absmax8", path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "absmax8", module)
        spec.loader.exec_module(module)  # registers it
        assert QUANTIZERS["absmax8"] is POLICIES["absmax8"] is module.Absmax8
        from sinklab.compress.config import quantizers_help

        assert "absmax8: 8-bit, protect 0 or N (first tokens)" in quantizers_help()

        folder, out = str(tiny_model_dir("llama", positions=1024)), tmp_path / "run"
        flags = ["--bits", "8", "--keep-sinks", "0,1", "--task", "ppl", "--outside-corpus", "none", "--context", "128"]
        assert cli.main(["compress", folder, "--quant", "absmax8", *flags, "--out", str(out), "--quiet"]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert sum(row[:1] == ["absmax8"] for row in rows) == 2, rows  # the command's table
        summary = json.loads((out / "summary.json").read_text())
        assert summary["presses"] == [] and summary["quantizers"] == ["absmax8"]
        cells = {cell["keep_sinks"]: cell for cell in summary["cells"]}
        assert sorted(cells) == [0, 1] and {(c["policy"], c["kind"], c["bits"]) for c in cells.values()} == {
            ("absmax8", "quantizer", 8)
        }
        assert cells[0]["bytes_ratio"] == pytest.approx(INT8_SHARE, rel=1e-3)
        assert cells[1]["bytes_ratio"] == pytest.approx((127 * INT8_SHARE + 1) / 128, rel=1e-3)
        for cell in cells.values():
            assert cell["ppl_ratio"]["shakespeare"] == pytest.approx(1.0, abs=1e-4)  # garbage values move it 0.4 %

        model = sinklab.load_model(folder).model
        ids = torch.randint(2, model.config.vocab_size, (1, CONTEXT), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            dense = model(ids, use_cache=True).cache
            with sinklab.applied(model, module.Absmax8(protect=1)):
                quantized = model(ids, use_cache=True).cache
        for layer, dense_layer in zip(quantized.layers, dense.layers):
            for held, full in zip(layer.sink, (dense_layer.keys, dense_layer.values)):
                assert torch.equal(held, full[:, :, :1])
            assert layer.store.length == CONTEXT - 1
            keys, values = torch.empty_like(dense_layer.keys[:, :, 1:]), torch.empty_like(dense_layer.values[:, :, 1:])
            layer.store.dequantize_into(keys, values)
            for back, full in ((keys, dense_layer.keys[:, :, 1:]), (values, dense_layer.values[:, :, 1:])):
                step = full.abs().amax(-1, keepdim=True) / 127  # half of it, plus 127 steps of float16's rounding
                assert ((back - full).abs() <= step * (0.5 + 127 * 2**-11) + 1e-6).all() and not torch.equal(back, full)
    finally:
        POLICIES.pop("absmax8", None)
        QUANTIZERS.pop("absmax8", None)  # the summary names it only as a string: the run still validates
