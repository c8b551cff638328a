import json
from pathlib import Path

import sinklab
from sinklab.accuracy import evaluate, lm_for, read_task, sizes_for

# A task in BIG-bench's multiple-choice format: your own file, or a BIG-bench name ("navigate") after `make bigbench`
examples = [{"input": f"Is {n} even or odd?", "target_scores": {"even": int(n % 2 == 0), "odd": n % 2}} for n in range(60)]
Path("parity").mkdir(exist_ok=True)
Path("parity/task.json").write_text(json.dumps({"name": "parity", "examples": examples}))

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
model, tokenizer = lm.model, lm.tokenizer
run = sinklab.tune_model(model, tokenizer, method="zerotuning", tasks=("parity/task.json",), validation=16, test=16)
print(run.frame())  # per task: acc untouched / tuned, the paired change and its 95 % interval, McNemar's p
tuning = run.data["tunings"]["parity"]  # a ZeroTuning (a gamma per layer and head) or an ACT (heads to calibrate)
with sinklab.applied(model, tuning):  # around any forward, generate, or lm-eval run
    sizes = sizes_for(0, validation=16, test=16)
    scored = evaluate(lm_for(model, tokenizer), [read_task("parity/task.json")], "test", shots=0, sizes=sizes)
print(scored[0].acc)
sinklab.tune.save_tuning(tuning, "parity.json")
sinklab.tune.load_tuning("parity.json")
