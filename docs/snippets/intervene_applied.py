import torch

import sinklab
from sinklab.intervene import MaskSelf, ScoreBias

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")  # a Hub id or a folder; load_model() is the default model
model, tok = lm.model, lm.tokenizer
ids = tok("To be, or not to be, that is the question", return_tensors="pt").input_ids.to(model.device)

with sinklab.applied(model, MaskSelf(5)), torch.no_grad():
    logits = model(ids).logits  # token 5 attends only to itself
    out = model.generate(ids, max_new_tokens=20, do_sample=False)  # also while decoding with the cache

with sinklab.applied(model, ScoreBias((0,), float("-inf"), layers=(1,))):
    model(ids, labels=ids).loss.backward()  # gradients flow through the edit

patterns = {}
with sinklab.applied(model, query_chunk=None) as block, torch.no_grad():  # no edit: probes only
    with block.hooks.attached([("blocks.*.attn.hook_pattern", lambda w, where: patterns.update({where.layer: w}))]):
        model(ids)  # patterns[i]: (B, H, T, T)
print(tok.decode(out[0, ids.shape[1] :]), patterns[0].shape)
