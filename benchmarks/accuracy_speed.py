"""What judging through sinklab costs against lm-eval's own plain run (BENCHMARKS.md 13, issue 40).

In one process, on the default model and one BIG-bench task's test split (``--task``, ``--test``
examples, zero-shot), alternated over ``--rounds`` rounds (the order reversed every round):

* ``lm_eval_plain``: lm-eval's own ``HFLM`` around the model (its tokenisation: no BOS added for
  SmolLM2), scored by the same evaluator call, nothing of sinklab's in the forward;
* ``sinklab_untouched``: ``sinklab.accuracy.evaluate`` (BOS first, the same evaluator), nothing applied;
* ``zerotuning``: the same inside ``sinklab.applied`` with a ZeroTuning that scales a quarter of the heads;
* ``act``: inside ``applied`` with ACT on 16 heads (whole patterns, the paper's beta and threshold);
* ``suppress_sink``: inside ``sinklab.applied`` with the first-token sink removed.

Examples per second of each, the median over rounds, and each over ``lm_eval_plain``. Goals: the
untouched path >= 0.95x, an intervention or tuning active >= 0.8x.

Run: `.venv/bin/python benchmarks/accuracy_speed.py [--task navigate --test 40 --rounds 3]`
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import record

import sinklab
from sinklab import intervene, tune
from sinklab.accuracy import evaluate, lm_for, read_task, sizes_for
from sinklab.models.hf import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="navigate")
    parser.add_argument("--test", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model_ = load_model(None)
    model, tokenizer = model_.model, model_.tokenizer
    task, sizes = read_task(args.task), sizes_for(0, test=args.test)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    generator = torch.Generator().manual_seed(0)
    picked = torch.randperm(layers * heads, generator=generator)[: layers * heads // 4].tolist()
    gammas = [[1.0] * heads for _ in range(layers)]
    for i in picked:
        gammas[i // heads][i % heads] = 1.5
    zero = tune.ZeroTuning(gammas)
    act = tune.ACT(tuple(divmod(i, heads) for i in picked[:16]))
    ours = lm_for(model, tokenizer)

    from lm_eval.models.huggingface import HFLM

    plain_lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8, device=str(model.device))

    def within(block):
        def run():
            with block():
                return evaluate(ours, [task], "test", 0, sizes)[0]

        return run

    methods = {
        "lm_eval_plain": lambda: evaluate(plain_lm, [task], "test", 0, sizes)[0],
        "sinklab_untouched": lambda: evaluate(ours, [task], "test", 0, sizes)[0],
        "zerotuning": within(lambda: sinklab.applied(model, zero)),
        "act": within(lambda: sinklab.applied(model, act)),
        "suppress_sink": within(lambda: sinklab.applied(model, intervene.suppress_sink(0))),
    }
    seconds = {name: [] for name in methods}
    accuracy = {}
    with torch.no_grad():
        methods["lm_eval_plain"]()  # warm-up
        for r in range(args.rounds):
            order = list(methods) if r % 2 == 0 else list(reversed(methods))
            for name in order:
                start = time.perf_counter()
                accuracy[name] = methods[name]().acc
                seconds[name].append(time.perf_counter() - start)
    rate = {name: args.test / statistics.median(s) for name, s in seconds.items()}
    record(
        "accuracy_speed",
        {
            "task": task.name,
            "test": args.test,
            "rounds": args.rounds,
            "threads": torch.get_num_threads(),
            "seconds": seconds,
            "examples_per_s": rate,
            "over_lm_eval_plain": {name: rate[name] / rate["lm_eval_plain"] for name in rate},
            "accuracy": accuracy,
        },
    )


if __name__ == "__main__":
    main()
