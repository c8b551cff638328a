"""``sinklab compress``'s settings (:class:`CompressConfig`, ``sinklab.compress_model``'s keyword
arguments): the grid of presses and quantizers, when they act (after the prefill, or while
decoding), the judges and their inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar, Iterable, Optional, Union

from ..accuracy import (
    EVERY,
    ROTATIONS_HELP,
    SIZES,
    check_judge_flags,
    check_rotations,
    migrated_judge,
    sizes_for,
    split_rule_setting,
    task_names,
)
from ..core.configs import setting
from ..core.errors import SinklabError, check, refuse_unread
from ..kvcache import (
    DETECTED,
    PRESSES,
    PROTECTS,
    QUANTIZERS,
    AdaKV,
    DecodingPress,
    budget_tokens,
    check_ratio,
    held_apart,
    least_budget,
    policy_named,
)
from ..models.hf import MODEL_HELP, LoadOptions
from ..scan import BOS_CHOICES
from .tasks import JUDGES, MIN_CONTEXT, positions_read

#: ``--press adakv_<press>``: AdaKV over that press (:class:`~sinklab.kvcache.AdaKV`, kvpress's
#: ``AdaKVPress``): the press's scores, ratio and sinks, each layer's budget pooled over its heads.
ADAKV = "adakv_"


def press_named(name: str, seed: int, **fields):
    """The press ``--press name`` means, with ``fields`` (ratio, keep_sinks) and the run's seed
    where it draws (random); ``adakv_<press>`` wraps that press in AdaKV."""
    inner = name.removeprefix(ADAKV)
    press = policy_named(inner, **fields, **({"seed": seed} if inner == "random" else {}))
    return AdaKV(press) if name.startswith(ADAKV) else press


RATIOS = (0.25, 0.5, 0.75, 0.875)


def quantizers_help() -> str:
    """Each registered quantizer's bit widths and what it protects, for ``--quant``'s help."""
    return "; ".join(
        f"{name}: {'/'.join(map(str, cls.bit_widths))}-bit, protect {PROTECTS[cls.protects]}" for name, cls in QUANTIZERS.items()
    )


def keep_sinks_list(text: str) -> tuple:
    """``0,1,4,detected`` -> (0, 1, 4, "detected")."""
    values = [t.strip() for t in text.split(",") if t.strip()]
    check(values, "--keep-sinks needs at least one of: a number of first tokens, or 'detected'")
    bad = [v for v in values if v != DETECTED and not v.isdigit()]
    check(not bad, f"--keep-sinks takes numbers of first tokens and 'detected', got {', '.join(bad)}")
    return tuple(v if v == DETECTED else int(v) for v in values)


#: Settings read only under another: setting -> (the setting that makes them read, as its flag is given).
READ_ONLY_WITH = {
    "budget": ("during", "--during decode"),
    "every": ("during", "--during decode"),
    "decode_tokens": ("during", "--during decode"),
    "accuracy_shots": ("accuracy", "--accuracy TASKS"),
    "accuracy_test": ("accuracy", "--accuracy TASKS"),
    "accuracy_rotations": ("accuracy", "--accuracy TASKS"),
}


def check_read(given: Iterable[str], during: str, accuracy) -> None:
    """Refuse, in one line naming the flag that enables it, a setting given that this run would not
    read (``--budget`` after a prefill, ``--accuracy-test`` with no ``--accuracy``): it exited 0
    having done nothing with it. ``given``: the names of the settings the user gave."""
    enabled = {"during": during == "decode", "accuracy": bool(accuracy)}
    refuse_unread(given, {name: (enabled[enabler], flag) for name, (enabler, flag) in READ_ONLY_WITH.items()})


@dataclass
class CompressConfig:
    """``sinklab compress``'s settings (and ``sinklab.compress_model``'s keyword arguments)."""

    VERSION: ClassVar[int] = 4
    MIGRATIONS: ClassVar[dict] = {
        1: lambda saved: {**saved, "accuracy": [], "accuracy_shots": 5, "accuracy_test": SIZES["test"]},
        2: lambda saved: {**saved, "during": "prefill", "budget": 512, "every": 64, "decode_tokens": 4096},
        3: migrated_judge,
    }

    model: Optional[str] = setting(None, help=MODEL_HELP, cli=False)
    presses: Optional[tuple[str, ...]] = setting(
        None,
        flag="--press",
        metavar="P[,P...]",
        shown="all, or none when only --quant is given",
        help=f"from {', '.join(PRESSES)}, or {ADAKV}<press> for AdaKV over it (each layer's budget pooled over its "
        "heads; kvpress's AdaKVPress); 'none' for quantizers only",
        parse=lambda text: () if text == "none" else tuple(t.strip() for t in text.split(",") if t.strip()),
    )
    ratios: Optional[tuple[float, ...]] = setting(
        None,
        flag="--ratio",
        metavar="R[,R...]",
        shown=",".join(map(str, RATIOS)),
        help="fractions of the context removed, in [0, 1) (0: the full cache); not read with --during decode",
    )
    keep_sinks: tuple = setting(
        (0, 1, 4, DETECTED),
        parse=keep_sinks_list,
        metavar="K[,K...]",
        help="sinks kept inside the budget: numbers of first tokens, and/or 'detected'",
    )
    quantizers: Optional[tuple[str, ...]] = setting(
        None,
        flag="--quant",
        shown=f"{','.join(QUANTIZERS)}, or none when only --press is given",
        choices=tuple(QUANTIZERS),
        metavar="Q[,Q...]",
        help=f"KV quantizers ({quantizers_help()}); 'none' for presses only",
        parse=lambda text: () if text == "none" else tuple(t.strip() for t in text.split(",") if t.strip()),
    )
    bits: tuple[int, ...] = setting((2, 4, 8), metavar="B[,B...]", help="bit widths; each quantizer runs those it takes")
    group_size: int = setting(32, help="KIVI's group: tokens per key scale, channels per value scale (KIVI's paper: 32)")
    residual: int = setting(128, help="KIVI's recent tokens kept in full precision (KIVI's paper: 128)")
    tasks: tuple[str, ...] = setting(JUDGES, flag="--task", choices=JUDGES, metavar="T[,T...]", help="ppl and/or passkey")
    contexts: tuple[int, ...] = setting((2048,), flag="--context", metavar="C[,C...]", help="context lengths in tokens")
    corpus: str = setting("shakespeare", help="the text for ppl: shakespeare, a text file or folder, or hf:NAME")
    outside: Optional[str] = setting(
        "pydoc",
        flag="--outside-corpus",
        metavar="CORPUS",
        parse=lambda text: None if text == "none" else text,
        help="a second text for ppl, of another domain (pydoc: Python's language reference; 'none' skips it)",
    )
    keys: int = setting(2, help="passkeys per depth (depths: 10, 50 and 90 percent of the filler)")
    accuracy: tuple[str, ...] = setting(
        (),
        metavar="T[,T...]",
        parse=task_names,
        help="BIG-bench tasks (names or task.json paths; suite: the suite's) judged by multiple-choice accuracy: "
        "lm-eval's few-shot prompts, their shots the compressed context; none by default",
    )
    accuracy_shots: int = setting(5, help="shots per --accuracy prompt, from the task's own examples: what is compressed")
    accuracy_test: int = setting(SIZES["test"], help="test examples per --accuracy task")
    accuracy_rotations: int = setting(EVERY, help=ROTATIONS_HELP + "; each order's shots are compressed apart")
    splits: int = split_rule_setting()
    during: str = setting(
        "prefill",
        choices=("prefill", "decode"),
        help="when the presses act: once after the prefill, or while decoding (every --every tokens fed after the "
        "context, the cache brought back to --budget; presses only)",
    )
    budget: Union[int, float] = setting(
        512, parse=lambda text: float(text) if "." in text else int(text),
        help="--during decode: keys per KV head the cache is brought back to (or a fraction of the context, in (0, 1])",
    )  # fmt: skip
    every: int = setting(64, help="--during decode: tokens fed between two compressions")
    decode_tokens: int = setting(4096, help="--during decode: tokens of the text after the context fed and scored (ppl)")
    seed: int = setting(0, help="draws the passkeys (and the random press)")
    bos: str = setting("auto", choices=BOS_CHOICES, help="put the tokenizer's BOS first: yes, no, or auto (when it has one)")
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        self._fill_grid()
        self.accuracy = task_names(self.accuracy)  # accuracy="suite" as the flag reads it
        for ratio in self.ratios:
            check_ratio(ratio, "--ratio")
        for keep in self.keep_sinks:
            check(keep == DETECTED or (isinstance(keep, int) and keep >= 0), f"--keep-sinks: bad value {keep!r}")
        for context in self.contexts:
            check(context >= MIN_CONTEXT, f"--context must be at least {MIN_CONTEXT} tokens, got {context}")
        check(self.keys >= 1, f"--keys must be at least 1, got {self.keys}")
        if self.accuracy:  # at least one shot: the shots are the context a press compresses
            check_judge_flags(self.accuracy_shots, self.accuracy_test, self.bos, min_shots=1)
            check_rotations(self.accuracy_rotations, "--accuracy-rotations")
        unknown = [p for p in self.presses if p.removeprefix(ADAKV) not in PRESSES]  # the registry as it is now
        check(not unknown, f"unknown press {', '.join(unknown)}; choose from: {', '.join(PRESSES)}, or {ADAKV}<press>")
        unknown = [q for q in self.quantizers if q not in QUANTIZERS]
        check(not unknown, f"unknown quantizer {', '.join(unknown)}; choose from: {', '.join(QUANTIZERS)}")
        check(self.presses or self.quantizers, "give at least one press or quantizer")
        for name in self.quantizers:
            check(
                self.quantizer_bits(name) and self.protections(name),
                f"--quant {name} has nothing to run: it takes --bits {','.join(map(str, QUANTIZERS[name].bit_widths))} "
                f"and protects {PROTECTS[QUANTIZERS[name].protects]}; got --bits {','.join(map(str, self.bits))} "
                f"--keep-sinks {','.join(map(str, self.keep_sinks))}",
            )
        if self.during == "decode":  # after the presses and sinks are known good: it builds each press
            self._check_decoding()

    @property
    def accuracy_sizes(self) -> dict:
        """The --accuracy tasks' splits: test and the shot pool (nothing is tuned: no validation)."""
        return sizes_for(self.accuracy_shots, 0, self.accuracy_test)

    def _fill_grid(self) -> None:
        """Presses and quantizers left out (None): naming some of one kind runs that kind only (a
        presses-only table never pays for the quantizers, nor the reverse); otherwise a kind left
        out runs all of it (the default grid; ``--press none`` alone: every quantizer). While
        decoding the grid is presses only, and their ratio is the budget's: no ratios."""
        presses, quantizers, decoding = self.presses, self.quantizers, self.during == "decode"
        check(not (decoding and self.ratios), "--during decode brings the cache to --budget: give no --ratio")
        check(not (decoding and quantizers), "--during decode presses the cache while decoding: give presses, not --quant")
        if self.ratios is None:
            self.ratios = () if decoding else RATIOS
        if presses is None:
            self.presses = () if quantizers else tuple(PRESSES)
        if quantizers is None:
            self.quantizers = () if presses or decoding else tuple(QUANTIZERS)

    def _check_decoding(self) -> None:
        """The settings a decoding press reads (the budget's type, ``every``: checked by building
        one that holds apart nothing), then every press's fit at each context (a ppl window's prompt
        is the context; :mod:`.feasible` checks the passkey prompts, which the tokenizer sizes)."""
        check(not self.accuracy, "--accuracy judges a cache compressed after its prefill: not with --during decode")
        pooled = [p for p in self.presses if p.startswith(ADAKV)]
        check(
            not pooled,
            f"--press {pooled[0] if pooled else ''}: a decoding press brings every KV head to the same budget each step, "
            "and AdaKV gives each head its own number of keys: name the press it wraps with --during decode",
        )
        check(self.decode_tokens >= 1, f"--decode-tokens must be at least 1, got {self.decode_tokens}")
        self.budget = DecodingPress(policy_named("knorm"), self.budget, self.every).budget  # numpy's integers: int
        self.check_budget(self.contexts)

    def check_budget(self, prompts: Iterable[int]) -> None:
        """Refuse, in one line naming the press, a budget that cannot hold a press's sinks, its own
        window and a key it scores, for every press and ``--keep-sinks`` and each prompt length of
        ``prompts`` (a fraction is a number of keys only for a prompt). Checked here, not in the
        jobs: there it failed after the full cache's job, on every retry, run.json left "running"."""
        for name in self.presses:
            press = press_named(name, self.seed)
            for keep in self.keep_sinks:
                for prompt in [0] if isinstance(self.budget, int) else sorted(set(prompts)):
                    self._check_fits(replace(press, keep_sinks=keep), prompt)

    def _check_fits(self, press, prompt: int) -> None:
        """One press at one keep-sinks setting and prompt length (any, for a budget in tokens)."""
        tokens = budget_tokens(self.budget, prompt)
        sinks, window = held_apart(press, tokens, self.every)
        if tokens > sinks + window:
            return
        least, fraction = least_budget(press, self.every), not isinstance(self.budget, int)
        asked = f"{self.budget:g} ({tokens} keys of a {prompt}-token prompt)" if fraction else f"{self.budget}"
        held = f"its {sinks} sinks" + (f", its {window}-key window" if window else "") + " and a key it scores"
        give = f"give --budget {least} or more" if least else "no budget can: leave this press out of --during decode"
        if least and fraction and least <= prompt:  # the smallest fraction that gives ``least`` keys, rounded up
            give += f" (or a fraction of at least {math.ceil(least / prompt * 100) / 100:g})"
        raise SinklabError(f"--press {press.name} --keep-sinks {press.keep_sinks}: --budget {asked} cannot hold {held}; {give}")

    def decoding_cells(self, name: str) -> dict:
        """A press's row while decoding: cell name ("decode/keep_sinks") -> the decoding press."""
        base = press_named(name, self.seed)
        return {f"decode/{k}": DecodingPress(replace(base, keep_sinks=k), self.budget, self.every) for k in self.keep_sinks}

    @property
    def positions(self) -> int:
        """The positions the run feeds the model (:func:`~.tasks.positions_read`)."""
        return positions_read(self.contexts, self.decode_tokens if self.during == "decode" else 0)

    def press_grid(self) -> list[tuple]:
        """A press's (ratio, keep_sinks) cells. Ratio 0 evicts nothing, so it is the dense cache
        whatever the sinks kept: one cell (keep_sinks 0), never a fake pair of the sink effect."""
        return [(r, k) for r in self.ratios for k in (self.keep_sinks if r else (0,))]

    def press_cells(self, name: str) -> dict:
        """A press's row: cell name ("ratio/keep_sinks") -> the press."""
        return {f"{r:g}/{k}": press_named(name, self.seed, ratio=r, keep_sinks=k) for r, k in self.press_grid()}

    def quantizer_bits(self, name: str) -> list[int]:
        return [b for b in self.bits if b in QUANTIZERS[name].bit_widths]

    def protections(self, name: str) -> list:
        """The protect settings of ``--keep-sinks`` a quantizer takes (quanto none, static numbers only)."""
        return QUANTIZERS[name].protections(self.keep_sinks)
