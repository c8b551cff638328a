"""Do sinklab's gradient profile and the papers' one-head-at-a-time profile rank heads alike?
(issue 50; BENCHMARKS.md 13)

On one task's validation split (the examples a tuning reads, every rotation of the choices), the
default model's heads are profiled both ways for ZeroTuning (supervised objective, the correct
choice's log-probability among the choices): the gradient at gamma = 1 (``--profile gradient``) for
every head, and the ablation at gamma 1.5, one head at a time (``--profile ablation``), for a stated
subset: the ``--per-group`` heads the gradient ranks highest, as many it ranks lowest, and as many
drawn at random from the rest (seeded), since all 270 heads take hours per gamma on a CPU. Reported:
Spearman's rank correlation between the two profiles over the subset (a subset holding both extremes
favours a high one: the random group's own correlation is recorded too, with every head's two
values), the overlap of the top quarter each would choose within the subset (ZeroTuning rescales
the quarter of heads largest in size), the sign agreement, and each profile's CPU time. One row in
``results/profile_ranking.jsonl``.

Run: `.venv/bin/python benchmarks/profile_ranking.py --task movie_recommendation [--per-group 32]`
(the BIG-bench task files are fetched once on first use).
"""

from __future__ import annotations

import argparse
import math
import random
import time

import torch
from common import record

from sinklab.accuracy import lm_for, questions, read_task, sizes_for
from sinklab.models.hf import load_model
from sinklab.tune.methods.zerotuning import ABLATION_GAMMA
from sinklab.tune.profile import ablation_profile, head_profile


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (average ranks at ties)."""

    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="movie_recommendation")
    parser.add_argument("--per-group", type=int, default=32, help="heads taken from the top, the bottom and at random")
    parser.add_argument("--validation", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    loaded = load_model(None)
    model, config = loaded.model, loaded.model.config
    shape = (config.num_hidden_layers, config.num_attention_heads)
    task = read_task(args.task)
    asked = questions(lm_for(model, loaded.tokenizer, 1), task, "validation", 0, sizes_for(0, args.validation), args.seed)

    clock = time.process_time()
    gradient = head_profile(model, asked, "zerotuning", "supervised", shape)
    gradient_cpu = time.process_time() - clock
    ranked = [divmod(i, shape[1]) for i in gradient.flatten().argsort(descending=True).tolist()]
    top, bottom = ranked[: args.per_group], ranked[-args.per_group :]
    rest = ranked[args.per_group : -args.per_group]
    drawn = random.Random(args.seed).sample(rest, args.per_group)
    subset = top + bottom + drawn
    groups = ["top"] * len(top) + ["bottom"] * len(bottom) + ["random"] * len(drawn)

    clock = time.process_time()
    ablated = ablation_profile(model, asked, "zerotuning", "supervised", shape, math.log(ABLATION_GAMMA), heads=subset)
    ablation_cpu = time.process_time() - clock

    g = [float(gradient[h]) for h in subset]
    a = [float(ablated[h]) for h in subset]
    quarter = max(1, len(subset) // 4)
    chosen_g = set(sorted(range(len(subset)), key=lambda i: -abs(g[i]))[:quarter])
    chosen_a = set(sorted(range(len(subset)), key=lambda i: -abs(a[i]))[:quarter])
    record(
        "profile_ranking",
        {
            "model": loaded.name,
            "task": task.name,
            "validation_examples": args.validation,
            "questions": len(asked),
            "heads": len(subset),
            "groups": {"top": args.per_group, "bottom": args.per_group, "random": args.per_group},
            "gamma": ABLATION_GAMMA,
            "spearman": spearman(g, a),
            "top_quarter_overlap": len(chosen_g & chosen_a) / quarter,
            "sign_agreement": sum((x > 0) == (y > 0) for x, y in zip(g, a)) / len(subset),
            "per_head": [
                {"head": list(h), "group": grp, "gradient": x, "ablation": y} for h, grp, x, y in zip(subset, groups, g, a)
            ],
            "random_group_spearman": spearman(g[-args.per_group :], a[-args.per_group :]),
            "gradient_cpu_s": round(gradient_cpu, 1),
            "ablation_cpu_s": round(ablation_cpu, 1),
            "torch_threads": torch.get_num_threads(),
        },
    )


if __name__ == "__main__":
    main()
