import sinklab
from sinklab.kvcache import KIVI

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
context_ids = lm.tokenizer("A long document to keep in a small cache. " * 20, return_tensors="pt").input_ids.to(lm.model.device)

with sinklab.applied(lm, KIVI(bits=2, protect=1)) as edits:  # packed 2-bit, the first token in full precision
    out = lm.model.generate(context_ids, max_new_tokens=20)
print(edits.cache.last.bytes_after / edits.cache.last.bytes_before)  # the bytes the cache really holds

table = sinklab.compress_model(lm, quantizers=("kivi",), bits=(2, 4), keep_sinks=(0, 1), contexts=(512,), tasks=("ppl",))
print(table.frame("quantized"))  # one row per (bits, protect): ppl_ratio_<text>, bytes_ratio
