import torch

import sinklab
from sinklab.kvcache import KIVI, SnapKV

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")  # or load_model(): the default model
tok = lm.tokenizer
context_ids = tok("A long document to compress. " * 20, return_tensors="pt").input_ids.to(lm.model.device)
question_ids = tok(" What is the document about?", add_special_tokens=False, return_tensors="pt").input_ids.to(lm.model.device)

with sinklab.applied(lm, SnapKV(ratio=0.5, keep_sinks=4)) as edits:
    out = lm.model.generate(context_ids, max_new_tokens=50)  # the context is compressed after its prefill
last = edits.cache.last
print(last.kept, last.sinks, last.bytes_after / last.bytes_before)

with SnapKV(compression_ratio=0.5)(lm.model):  # kvpress's spelling of the same block
    out = lm.model.generate(context_ids, max_new_tokens=50)
with sinklab.applied(lm, SnapKV(compression_ratio=0.5), question=question_ids):
    out = lm.model.generate(torch.cat([context_ids, question_ids], -1), max_new_tokens=50)  # the question stays whole
with sinklab.applied(lm, KIVI(bits=2, protect=1)):  # packed 2-bit, the first token in float
    out = lm.model.generate(context_ids, max_new_tokens=50)
with sinklab.applied(lm, SnapKV(ratio=0.5, keep_sinks=4), KIVI(bits=4, protect=4)) as both:
    out = lm.model.generate(context_ids, max_new_tokens=50)  # evict, then quantize what is kept
print(both.cache.last.bytes_after / both.cache.last.bytes_before)
