import sinklab
from sinklab.intervene import MaskSelf, VarianceAmplify

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
run = sinklab.intervene_model(lm, interventions=[MaskSelf(10), VarianceAmplify(5, 4.0)], tokens=32, batch=2)  # one run each
print(run.frame()[["experiment", "layer", "share_at_k", "loss"]])  # one row per (experiment, layer)
