import sinklab

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
table = sinklab.compress_model(lm, presses=("snapkv", "knorm"), ratios=(0.5,), keep_sinks=(0, 4), contexts=(512,))
# one row per cell: policy, kind, ratio, bits, keep_sinks, context,
# ppl_ratio_<text>, passkey_accuracy, key_logprob, bytes_ratio
print(table.frame())
