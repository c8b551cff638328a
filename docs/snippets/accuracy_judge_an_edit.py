import json
from pathlib import Path

import sinklab
from sinklab.accuracy import evaluate, lm_for, read_task, sizes_for, verdict
from sinklab.intervene import suppress_sink

# A task in BIG-bench's multiple-choice format: your own file, or a BIG-bench name ("navigate") after `make bigbench`
examples = [{"input": f"Is {n} even or odd?", "target_scores": {"even": int(n % 2 == 0), "odd": n % 2}} for n in range(60)]
Path("parity").mkdir(exist_ok=True)
Path("parity/task.json").write_text(json.dumps({"name": "parity", "examples": examples}))

lm = sinklab.load_model("HuggingFaceTB/SmolLM2-135M")
task, sizes = read_task("parity/task.json"), sizes_for(0, validation=16, test=16)
intact = evaluate(lm_for(lm.model, lm.tokenizer), [task], "test", shots=0, sizes=sizes)[0]
with sinklab.applied(lm, suppress_sink()):  # whatever edit the block holds is judged by the same engine
    suppressed = evaluate(lm_for(lm.model, lm.tokenizer), [task], "test", shots=0, sizes=sizes)[0]
print(intact.acc, intact.acc_strict, suppressed.acc)  # rotation-averaged and strict accuracy
print(verdict(intact, suppressed)["acc_change"])  # the paired change, its bootstrap interval and sign-flip p
