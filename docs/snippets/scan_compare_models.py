from transformers import AutoModelForCausalLM, AutoTokenizer

import sinklab

tokenizer = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")
full = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
half = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M", dtype="bfloat16")
both = sinklab.scan_models({"float32": (full, tokenizer), "bfloat16": (half, tokenizer)}, tokens=32, batch=2)
print(both.frame())  # sinklab scan A B: one row per (model, layer) with first_token_mass

some = sinklab.scan_model(full, tokenizer, tokens=32, batch=2, layers=(0, 2))  # record only these layers
print(some.summary["recorded_layers"], some.summary["sink_rate"]["value"])  # Sink_k^eps over the recorded pairs
