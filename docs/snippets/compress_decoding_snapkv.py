import sinklab
from sinklab.kvcache import DecodingPress, SnapKV

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
context_ids = lm.tokenizer("Once upon a time", return_tensors="pt").input_ids.to(lm.model.device)

with sinklab.applied(lm, DecodingPress(SnapKV(keep_sinks=4), budget=128, every=32)) as edits:
    out = lm.model.generate(context_ids, max_new_tokens=200, do_sample=False)  # the cache stays at 128 to 159 keys
print(out.shape, edits.cache.last.kept)  # keys per layer after the last compression

table = sinklab.compress_model(
    lm,
    during="decode",
    presses=("snapkv", "streaming_llm"),
    keep_sinks=(0, 4),
    contexts=(256,),  # a 256-token prompt,
    decode_tokens=256,  # then 256 tokens of the text fed through the pressed cache
    tasks=("ppl",),  # the perplexity judge only (the passkey's adds 1,024 filler tokens)
)
print(table.frame())  # one row per (press, keep_sinks): the decoded text's perplexity against the full cache's
