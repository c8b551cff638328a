"""``sinklab adapt --sink-prefix``: the first token as a cached prefix, checked exact, and what
taking it out of the stream buys under low-bit quantization (see :mod:`.quantize`). A prefix whose
logits leave :data:`~.prefix.EXACT_EPS` fails the run (:class:`NumericalCheckFailed`, exit status 3)
after its results are written."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

import torch

from ..core import configs
from ..core.errors import NumericalCheckFailed, SinklabError, check
from ..core.progress import PhaseClock, progress_bar
from ..core.results import Capability, RunContext, RunResult, register, stamped
from ..models.hf import MODEL_HELP, LoadedModel, LoadOptions, describe_architecture, model_facts
from ..models.subjects import transformers_model
from ..scan import BOS_CHOICES
from . import page, plots
from .evaluate import Condition, Evaluation, content_hidden, content_nll, corpus_windows, perplexity, prepend
from .frame import ADAPT_TABLES
from .prefix import EXACT_EPS, SinkPrefix, bos_token, exact_tolerance
from .quantize import QUANT_SCHEMES, quantized
from .search import candidate_tokens, search_prefix

FULL_PRECISION = "fp"
PREFIX, CUSHION = "sink_prefix", "cushion_prefix"  # the prefixes' names, and their files' (<name>.safetensors)
PREFIX_FILE = f"{PREFIX}.safetensors"
EXACT_WINDOWS = 2  # windows whose full logits are compared, prefix against BOS in the sequence


def nested_evaluation(saved: dict) -> dict:
    """Runs before config version 1 kept the evaluation settings at the top level."""
    moved = {k: saved[k] for k in EVALUATION_KEYS if k in saved}
    return {**{k: v for k, v in saved.items() if k not in EVALUATION_KEYS}, "evaluation": moved}


EVALUATION_KEYS = ("corpus", "tokens", "windows", "calibration", "schemes")


@dataclass
class PrefixConfig:
    """``sinklab adapt --sink-prefix``'s settings (and ``sinklab.adapt_model``'s keyword arguments)."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[dict] = {0: nested_evaluation}

    model: Optional[str] = configs.setting(None, help=MODEL_HELP, cli=False)
    evaluation: Evaluation = field(default_factory=Evaluation)
    bos: str = configs.setting(
        "auto",
        choices=BOS_CHOICES,
        help="put a BOS token first in every sequence: yes, no, or auto (when the tokenizer has one); "
        "the BOS is the sink; no: a prefix is searched instead",
    )
    prefix_tokens: int = configs.setting(
        0, help="tokens searched after BOS to absorb outliers (CushionCache); 1 when there is no BOS"
    )
    search_seconds: float = configs.setting(300.0, help="time budget of the prefix search")
    candidates: int = configs.setting(64, help="most frequent calibration tokens tried at each prefix position")
    load: LoadOptions = field(default_factory=LoadOptions)

    def __post_init__(self) -> None:
        check(self.bos in BOS_CHOICES, f"--bos must be yes, no or auto, got {self.bos!r}")
        check(self.prefix_tokens >= 0, f"--prefix-tokens must be 0 or more, got {self.prefix_tokens}")
        check(self.search_seconds > 0 and self.candidates >= 1, "--search-seconds must be positive and --candidates at least 1")


def measure(cfg: PrefixConfig, context: RunContext = RunContext()) -> RunResult:
    """The sink prefix, its exactness check and the quantized perplexities, in memory: the summary
    and, as data, the prefixes computed (``sink_prefix``: BOS's keys and values; ``cushion_prefix``:
    the searched one), as :class:`SinkPrefix` values."""
    ev = cfg.evaluation
    clock = PhaseClock()
    with clock.phase("load"):
        loaded = transformers_model(context.subject) if context.subject is not None else cfg.load.load(cfg.model)
        model = loaded.model
        bos = _first_token(cfg, loaded)
        evaluation = corpus_windows(ev.corpus, loaded.tokenizer, ev.tokens, ev.windows, held_out=True)
        calibration = corpus_windows(ev.corpus, loaded.tokenizer, ev.tokens, ev.calibration, held_out=False)
    summary = {
        "model": loaded.name,
        "architecture": describe_architecture(model),
        **model_facts(model),
        "method": "sink_prefix",
        "bos_token": bos,
        "tokens": ev.tokens,
        "windows": ev.windows,
        "calibration_windows": ev.calibration,
    }
    conditions, prefixes = [], {}
    if bos is not None:
        with clock.phase("prefix"):
            prefixes[PREFIX] = SinkPrefix.compute(model, [bos])
        conditions += [Condition("bos", lead=(bos,)), Condition("prefix", prefix=prefixes[PREFIX])]
    conditions.append(Condition("no_bos"))
    n_search = cfg.prefix_tokens or (1 if bos is None else 0)
    if n_search:
        with clock.phase("search"):
            prefixes[CUSHION], summary["search"] = _cushion(cfg, loaded, calibration, bos, n_search)
        conditions.append(Condition("cushion", prefix=prefixes[CUSHION]))
    with clock.phase("exact check"):
        checked = next(c.prefix for c in conditions if c.prefix is not None)  # BOS's, else the searched one
        summary["exact_check"], summary["exact_check_tolerance"] = exact_check(model, checked, evaluation[:EXACT_WINDOWS])
        summary["exact_check_tokens"] = list(checked.token_ids)
    with clock.phase("measure"):
        summary.update(measure_ppl(model, conditions, evaluation, calibration, (FULL_PRECISION, *ev.schemes)))
    summary["seconds"] = clock.seconds
    return RunResult(stamped("adapt", summary), {"prefixes": prefixes})


def write(out: Path, result: RunResult) -> list[str]:
    """The prefix files (the figures, summary.json and the page are the pipeline's)."""
    for name, prefix in result.data["prefixes"].items():
        prefix.save(out / f"{name}.safetensors", result.summary["model"])
    return [f"{name}.safetensors" for name in result.data["prefixes"]]


def read_data(run_dir: Path) -> dict:
    return {
        "prefixes": {
            name: SinkPrefix.load(run_dir / f"{name}.safetensors")
            for name in (PREFIX, CUSHION)
            if (run_dir / f"{name}.safetensors").exists()
        }
    }


def _first_token(cfg: PrefixConfig, loaded: LoadedModel) -> Optional[int]:
    bos = bos_token(loaded.tokenizer, loaded.model)
    if cfg.bos == "yes" and bos is None:
        raise SinklabError(f"--bos yes, but {loaded.name} defines no BOS token; use --bos no (the prefix is then searched)")
    return None if cfg.bos == "no" else bos


def exact_check(model, prefix: SinkPrefix, windows: torch.Tensor) -> tuple[float, float]:
    """Largest |logit difference| of the content, prefix in the cache against its tokens in the
    sequence, and the tolerance :func:`~.prefix.exact_tolerance` gives it."""
    with torch.no_grad():
        in_sequence = model(input_ids=prepend(prefix.token_ids, windows.to(model.device)), use_cache=False).logits[
            :, prefix.length :
        ]
        cached = prefix.logits(model, windows)
    return float((in_sequence.float() - cached.float()).abs().max()), exact_tolerance(in_sequence, model.dtype)


def check_exact(result: RunResult) -> None:
    """Fail when the summary's exact check left its tolerance (the results are already written)."""
    summary = result.summary
    if summary["exact_check"] > summary["exact_check_tolerance"]:
        raise NumericalCheckFailed(
            f"the logits differ from the original model's by {summary['exact_check']:.2e} "
            f"(tolerance {summary['exact_check_tolerance']:.2e}, {EXACT_EPS} eps of the largest logit: "
            f"more than floating-point reduction order explains)"
        )


def _cushion(cfg: PrefixConfig, loaded: LoadedModel, calibration: torch.Tensor, bos, n_tokens: int) -> tuple[SinkPrefix, dict]:
    """The searched prefix (CushionCache) and what the search found."""
    lead = () if bos is None else (bos,)
    candidates = candidate_tokens(calibration, loaded.tokenizer, cfg.candidates)
    found = search_prefix(loaded.model, calibration[:1, :64], lead, n_tokens, candidates, cfg.search_seconds)
    check(len(found.tokens) > len(lead), f"the prefix search found nothing within --search-seconds {cfg.search_seconds:g}")
    prefix = SinkPrefix.compute(loaded.model, list(found.tokens))
    return prefix, {
        **asdict(found),
        "strings": [loaded.tokenizer.decode([t]) for t in found.tokens],
        "candidates": len(candidates),
    }


def measure_ppl(
    model, conditions: list[Condition], evaluation: torch.Tensor, calibration: torch.Tensor, settings: tuple[str, ...]
) -> dict:
    """Perplexity and the largest |input| of the linear layers per layer, per setting and condition."""
    ppl, maxima = {}, {}
    bar = progress_bar(total=len(settings) * len(conditions), desc="quantized perplexity", unit="run")
    start = time.perf_counter()
    for setting in settings:
        scheme = None if setting == FULL_PRECISION else QUANT_SCHEMES[setting]
        ppl[setting], maxima[setting] = {}, {}
        for condition in conditions:
            static = calibrate(model, calibration, condition) if scheme is not None and scheme.activations == "static" else None
            with quantized(model, scheme, static) as log:
                ppl[setting][condition.name] = perplexity(content_nll(model, evaluation, condition))
            maxima[setting][condition.name] = log.by_layer()
            bar.update()
    bar.close()
    return {"ppl": ppl, "max_abs_activation": maxima, "measure_seconds": time.perf_counter() - start}


def calibrate(model, calibration: torch.Tensor, condition: Condition) -> dict[str, float]:
    """Static per-tensor scales: each linear layer's largest |input| over the calibration windows,
    full-precision model, same condition as the evaluation."""
    with quantized(model, None) as log:
        for window in calibration:  # one window per forward, as scored; no output layer: only the linear inputs matter
            content_hidden(model, window[None], condition)
    return dict(log.by_module)


ADAPT = register(
    Capability(
        "adapt",
        PrefixConfig,
        measure,
        write,
        tables=ADAPT_TABLES,
        write_page=page.write,
        read_data=read_data,
        check=check_exact,
        figures=lambda result: plots.figures(result.summary, {}),
        sections=plots.sections,
    )
)
