from transformers import AutoModelForCausalLM, AutoTokenizer

import sinklab

model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")  # any causal LM: a Hub id or a folder
tokenizer = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")
scan = sinklab.scan_model(model, tokenizer, prompt="The quick brown fox jumps over the lazy dog.", tokens=16)
print(scan.frame().sort_values("first_token_mass").tail())  # one row per (layer, head)
