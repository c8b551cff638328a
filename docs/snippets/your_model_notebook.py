from transformers import AutoModelForCausalLM, AutoTokenizer

import sinklab
from sinklab.intervene import MaskSelf, VarianceAmplify

model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M", device_map="auto")  # any dtype, any device map
tokenizer = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")
scan = sinklab.scan_model(model, tokenizer, prompt="The quick brown fox jumps over the lazy dog.", tokens=16)
print(scan.frame())  # pandas, one row per (layer, head): model, dtype, device, layer, head, first_token_mass, sink_alpha, is_sink
scan.frame("layers")  # also "massive_activations", "super_neurons"; scan.tables lists them
scan.data["record"]  # the reduced tensors, e.g. column0 (L, H, T): the attention each query puts on position 0
summary = scan.summary  # the dict summary.json would hold; nothing is written unless out="runs/x"
scan.figures()  # the plotly figures (the PNGs of a run directory); scan.page("scan.html") draws the report from memory

sinklab.intervene_model(model, tokenizer, [MaskSelf(10), VarianceAmplify(5, 4.0)], tokens=32).frame()  # per (experiment, layer)
sinklab.stream_model(model, tokenizer, tokens=256, window=60, chunk=128).frame()  # one row per (policy, chunk)
sinklab.adapt_model(model, tokenizer, tokens=64, windows=2).frame()  # one row per (setting, condition)
sinklab.compress_model(
    model, tokenizer, presses=("snapkv",), ratios=(0.5,), contexts=(512,), tasks=("ppl",)
).frame()  # one row per cell: policy, kind, ratio or bits, keep_sinks, context
models = {"loaded": (model, tokenizer), "by name": "HuggingFaceTB/SmolLM2-135M"}  # loaded models and names mix
sinklab.scan_models(models, tokens=32).frame()  # sinklab scan A B: one row per (model, layer)

sinklab.scan_model(model, tokenizer, tokens=32, out="runs/scan")  # a run directory: summary.json, report.html
print(sinklab.load_result("runs/scan").frame("layers"))  # any finished run directory, back by its kind
