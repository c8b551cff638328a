import sinklab
from sinklab.intervene import MaskSelf
from sinklab.kvcache import KIVI

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
context_ids = lm.tokenizer("A long document to compress. " * 20, return_tensors="pt").input_ids.to(lm.model.device)

with sinklab.applied(lm.model, MaskSelf(10), KIVI(bits=4, protect=1)) as edits:
    out = lm.model.generate(context_ids, max_new_tokens=50)  # edits.hooks, edits.cache.last
print(edits.cache.last.bytes_after / edits.cache.last.bytes_before)
