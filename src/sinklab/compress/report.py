"""The compression run's tables and statements: the rows of its press and quantizer cells (the
terminal's and the page's) and, per press and quantizer, the paired statements of where keeping
(protecting) sinks changed perplexity, retrieval or accuracy most."""

from __future__ import annotations

from typing import Optional

from . import plots
from .summary import current

COLUMNS = [
    ("press", "policy", "s"),
    ("ratio", "ratio", "g"),
    ("sinks kept", "keep_sinks", "s"),
    ("context", "context", "d"),
    ("ppl / full", "ppl_ratio", ".3f"),
    ("passkey acc.", "passkey_accuracy", ".2f"),
    ("key log p", "key_logprob", ".2f"),
    ("acc., 1st --accuracy task", "choice_accuracy", ".2f"),
    ("kept", "kept_fraction", ".3f"),
    ("bytes / dense", "bytes_ratio", ".3f"),
]


QUANT_COLUMNS = [
    ("quantizer", "policy", "s"),
    ("bits", "bits", "d"),
    ("protected", "keep_sinks", "s"),
    ("context", "context", "d"),
    ("ppl / full", "ppl_ratio", ".3f"),
    ("passkey acc.", "passkey_accuracy", ".2f"),
    ("key log p", "key_logprob", ".2f"),
    ("acc., 1st --accuracy task", "choice_accuracy", ".2f"),
    ("bytes / dense", "bytes_ratio", ".3f"),
]


def table_rows(s: dict, kind: str = "press") -> list[dict]:
    """The terminal's and the page's rows of the cells of ``kind`` (press or quantizer): the first
    text's ppl ratio."""
    s = current(s)
    text = plots.first_text(s)
    return [
        {
            **c,
            "keep_sinks": str(c["keep_sinks"]),
            "ppl_ratio": c.get("ppl_ratio", {}).get(text),
            "passkey_accuracy": c.get("passkey", {}).get("accuracy"),
            "key_logprob": c.get("passkey", {}).get("logprob_mean"),
            "choice_accuracy": plots.choice_acc(c),
        }
        for c in s["cells"]
        if c["kind"] == kind
    ]


def statements(s: dict) -> list[str]:
    """The paired statements, one line each, led by the press's or quantizer's name (the terminal's)."""
    s = current(s)
    return [f"{name}: {line}" for name, lines in family_statements(s).items() for line in lines]


def family_statements(s: dict) -> dict[str, list[str]]:
    """Per press and quantizer: what its paired comparisons are over, then where keeping
    (protecting) sinks changed perplexity or retrieval most."""
    found = {name: _statement([e for e in s["sink_effect"] if e["policy"] == name]) for name in [*s["presses"], *s["quantizers"]]}
    return {name: lines for name, lines in found.items() if lines}


def _statement(mine: list[dict]) -> list[str]:
    """Up to five sentences for one press or quantizer: what its best and worst are taken over,
    the best and worst perplexity change from keeping sinks, the best passkey accuracy change, and
    the largest change of the true key's log-probability with its spread over the prompts, and
    the multiple-choice accuracy change where the correct choice's log-likelihood gained most (or,
    where every cell lowered it, lost least: "gained most, -0.51" read as a gain), each with where
    it happened."""
    if not mine:
        return []
    setting = SETTING[mine[0]["kind"]]
    lines = [_scope(mine, setting)]
    ppl = [(change, text, e) for e in mine for text, change in e.get("ppl_change", {}).items()]
    if ppl:
        (low, low_text, best), (high, high_text, worst) = min(ppl, key=lambda t: t[0]), max(ppl, key=lambda t: t[0])
        lines.append(
            f"{VERBS[setting]} sinks changes perplexity by {_percent(low)} at best ({_where(best, setting)}, "
            f"text {low_text}) and by {_percent(high)} at worst ({_where(worst, setting)}, text {high_text})"
        )
    acc = [e for e in mine if "accuracy_change" in e]
    if acc:
        top = max(acc, key=lambda e: e["accuracy_change"])
        lines.append(f"passkey accuracy {_signed(top['accuracy_change'])} at best ({_where(top, setting)})")
    paired = [e for e in mine if "logprob_change_std" in e]
    if paired:
        top = max(paired, key=lambda e: e["logprob_change"])
        lines.append(
            f"the true key's log-probability {_signed(top['logprob_change'])} nats at best "
            f"(per prompt {_signed(top['logprob_change_std'], sign='')} nats of spread; more probable in "
            f"{top['prompts_more_likely']} of {top['prompts']} prompts; {_where(top, setting)})"
        )
    choice = [(change, task, e) for e in mine for task, change in e.get("choice_change", {}).items()]
    if choice:
        change, task, top = max(choice, key=lambda t: t[0]["gold_loglik_change"]["mean"])
        gain = change["gold_loglik_change"]["mean"]
        lines.append(
            f"multiple-choice accuracy on {task} {_signed(change['acc_change']['mean'])} (McNemar p = "
            f"{change['mcnemar']['p']:.2g}) where the correct choice {'gained most' if gain >= 0 else 'lost least'}, "
            f"{_signed(gain)} nats ({_where(top, setting)})"
        )
    return lines


#: What a family calls its sink setting in a statement (one setting, ``keep_sinks``, in the cells).
SETTING = {"press": "keep_sinks", "quantizer": "protect"}
#: How a statement names a key's values: (one value, several).
NOUNS = {"keep_sinks": ("keep sinks",) * 2, "protect": ("protect",) * 2, "ratio": ("ratio", "ratios"),
         "bits": ("bit width", "bit widths"), "context": ("context", "contexts"), "ppl_change": ("text", "texts")}  # fmt: skip
VERBS = {"keep_sinks": "keeping", "protect": "protecting"}


def _scope(mine: list[dict], setting: str) -> str:
    """What a family's best and worst are taken over: each setting against 0 at every ratio (or
    bit width) and context, pairs of cells that read the same inputs (and every text, for perplexity)."""
    level, texts = "ratio" if mine[0]["kind"] == "press" else "bits", _listed(mine, "ppl_change")
    levels = _listed(mine, level) if mine[0][level] is not None else "while decoding"
    return (
        f"best and worst over {len(mine)} pair{'s' * (len(mine) > 1)} of cells on the same inputs: "
        f"{_listed(mine, 'keep_sinks', setting)} against 0; {levels}; {_listed(mine, 'context')} tokens"
        + (f"; perplexity on {texts}" if texts else "")
    )


def _listed(effects: list[dict], key: str, noun: Optional[str] = None) -> str:
    """The values of ``key`` among ``effects`` (the keys, where they are dicts), in order, once
    each, after the name of ``noun`` (default ``key``) in :data:`NOUNS`; empty when no effect has ``key``."""
    values = dict.fromkeys(v for e in effects if key in e for v in (e[key] if isinstance(e[key], dict) else [e[key]]))
    shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
    return f"{NOUNS[noun or key][len(values) > 1]} {shown}" if values else ""


def _percent(change: float) -> str:
    """A relative change as a percentage that a small change does not round to zero: one decimal
    from 0.1 % up, two significant digits below (``-0.0052%``, not ``-0.0%``); none reads ``0%``."""
    if change == 0:
        return "0%"
    return f"{change:+.1%}" if abs(change) >= 1e-3 else f"{change * 100:+.2g}%"


def _signed(value: float, sign: str = "+") -> str:
    """A difference with two decimals, or two significant digits where two decimals would read 0."""
    if value == 0 or abs(value) >= 5e-3:
        return f"{value:{sign}.2f}"
    return f"{value:{sign}.1e}"


def _where(effect: dict, setting: str) -> str:
    if effect["kind"] == "quantizer":
        level = f"{effect['bits']} bits"
    else:
        level = "while decoding" if effect["ratio"] is None else f"ratio {effect['ratio']:g}"
    return f"{setting.replace('_', ' ')} {effect['keep_sinks']}, {level}, {effect['context']} tokens"
