from transformers import AutoModelForCausalLM, AutoTokenizer

import sinklab
from sinklab.kvcache import SnapKV

model = AutoModelForCausalLM.from_pretrained("HuggingFaceTB/SmolLM2-135M")
tokenizer = AutoTokenizer.from_pretrained("HuggingFaceTB/SmolLM2-135M")
context = tokenizer("A long document to compress. " * 20, return_tensors="pt").input_ids

with sinklab.applied(model, SnapKV(compression_ratio=0.5, keep_sinks=4)) as edits:  # half the keys removed, 4 sinks kept
    out = model.generate(context, max_new_tokens=8, do_sample=False)
print(edits.cache.last.kept, edits.cache.last.sinks, edits.cache.last.bytes_after / edits.cache.last.bytes_before)

press = SnapKV(compression_ratio=0.5, keep_sinks=4)
with press(model):  # kvpress's spelling of sinklab.applied(model, press): the same block
    out = model.generate(context, max_new_tokens=8, do_sample=False)
