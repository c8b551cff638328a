import sinklab
from sinklab.adapt import SinkPrefix

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
content_ids = lm.tokenizer("To be, or not to be", add_special_tokens=False, return_tensors="pt").input_ids.to(lm.model.device)

prefix = SinkPrefix.compute(lm.model, [lm.tokenizer.bos_token_id])  # the first token's K, V in every layer
logits = prefix.logits(lm.model, content_ids)  # = the logits with BOS in the sequence
prefix.save("sink_prefix.safetensors")
cache = SinkPrefix.load("sink_prefix.safetensors").cache(lm.model)  # a transformers DynamicCache starting with it

run = sinklab.adapt_model(lm, tokens=64, windows=2, calibration=2)  # exactness, then perplexity under W8/W8A8/W4A8
print(run.frame())  # one row per (setting, condition) with ppl
