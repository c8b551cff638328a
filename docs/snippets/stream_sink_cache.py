import torch

import sinklab
from sinklab.stream import make_sink_cache

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")  # or a folder / .gguf / Hub id of a RoPE model
ids = lm.tokenizer("Once upon a time", return_tensors="pt").input_ids.to(lm.model.device)
cache = make_sink_cache(lm.model, n_sink=4, window=252)
out = lm.model.generate(ids, cache=cache, max_new_tokens=300, do_sample=False)  # constant memory
more = lm.tokenizer(" And then?", add_special_tokens=False, return_tensors="pt").input_ids.to(lm.model.device)
out = lm.model.generate(torch.cat([out, more], 1), cache=cache, max_new_tokens=20, do_sample=False)  # the next turn
print(out.shape, cache.layers[0].kept_tokens())  # at most 4 sinks + 252 recent tokens
