"""ZeroTuning's unsupervised gain on the accuracy suite: per task, the heads profiled and the
initial token's attention scaled to minimise the output entropy on the validation split (no label
read), then the test split scored by lm-eval tuned and untouched on the same examples. Can the sink
be used for accuracy without labels? (Han et al., ICLR 2026.)"""

from ...accuracy import SUITE
from ...tune import TUNE
from ..task import BenchTask, metric, register, spread_of


def read(result) -> dict:
    rows = result.summary["tasks"]
    gains = [r["paired"]["acc_change"]["mean"] for r in rows]
    return {
        "metrics": {
            "acc_gain": spread_of(gains, "tasks", better="higher"),
            "acc_untouched": metric(sum(r["test"]["untouched"]["acc"] for r in rows) / len(rows), better="higher"),
            "acc_tuned": metric(sum(r["test"]["tuned"]["acc"] for r in rows) / len(rows), better="higher"),
            "gold_loglik_change": spread_of([r["paired"]["gold_loglik_change"]["mean"] for r in rows], "tasks"),
        },
        "details": {r["task"]: {"chosen": r["chosen"], "acc_change": r["paired"]["acc_change"]} for r in rows},
    }


TASK = register(
    BenchTask(
        name="zerotuning_payoff",
        version=3,  # 2: the splits drawn test first (SPLIT_RULE 2); 3: the suite screened on 200+ examples (issue 50)
        group="payoff",
        title="ZeroTuning (unsupervised): accuracy gain",
        paper="Han et al. 2026 (ICLR), ZeroTuning; judged on BIG-bench (Srivastava et al. 2023) by lm-eval",
        capability=TUNE,
        settings={
            "method": "zerotuning",
            "mode": "unsupervised",
            "tasks": SUITE,
            "shots": 0,
            "validation": 40,
            "test": 100,
            "seed": 0,
        },
        quick={"validation": 20, "test": 30},
        read=read,
        positions=lambda s: 1024,
        headline="acc_gain",
    )
)
