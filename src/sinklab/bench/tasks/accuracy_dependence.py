"""Accuracy with the sink suppressed against intact, on the accuracy suite (BIG-bench tasks where the
model is clearly above chance, ``sinklab.accuracy.suite.SUITE``): every query's score on position 0
set to -inf in every layer, each task's test split scored by lm-eval intact and suppressed on the
same examples. Does the model need its sink to answer? (The perplexity version is
``suppressed_sink``.)"""

from ...accuracy import SUITE
from ...intervene import INTERVENE, suppress_sink
from ..task import BenchTask, metric, register, spread_of


def read(result) -> dict:
    rows = result.summary["accuracy"]
    intact = [r["intact"]["acc"] for r in rows]
    suppressed = [r["edited"]["acc"] for r in rows]
    return {
        "metrics": {
            "acc_intact": spread_of(intact, "tasks", better="higher"),
            "acc_suppressed": spread_of(suppressed, "tasks", better="higher"),
            # how much accuracy depends on the sink (none where the intact model answers nothing right)
            "acc_ratio": metric(sum(suppressed) / sum(intact) if sum(intact) else None),
            "gold_loglik_change": spread_of([r["gold_loglik_change"]["mean"] for r in rows], "tasks"),
        },
        "details": {r["task"]: {"acc_change": r["acc_change"], "mcnemar": r["mcnemar"]} for r in rows},
    }


TASK = register(
    BenchTask(
        name="accuracy_dependence",
        version=3,  # 2: the splits drawn test first (SPLIT_RULE 2); 3: the suite screened on 200+ examples (issue 50)
        group="dependence",
        title="accuracy with the sink suppressed / intact",
        paper="Gu et al. 2025 (ICLR): removing the sink; judged on BIG-bench (Srivastava et al. 2023) by lm-eval",
        capability=INTERVENE,
        settings={
            "bos": "auto",
            "corpus": "shakespeare",
            "tokens": 64,
            "batch": 1,
            "seed": 0,
            "interventions": (suppress_sink(0),),
            "accuracy": SUITE,
            "accuracy_shots": 0,
            "accuracy_test": 100,
        },
        quick={"accuracy_test": 30},
        read=read,
        positions=lambda s: 1024,  # the longest suite prompt stays well below (BENCHMARKS.md 13)
        headline="acc_ratio",
    )
)
