import sinklab

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
run = sinklab.stream_model(lm, tokens=256, sinks=4, window=60, chunk=64, recompute_every=32, latency_steps=2)
print(run.frame()[["policy", "start", "end", "ppl", "ms_per_token"]])  # one row per (policy, chunk of the stream)
