"""What ``sinklab compress`` refuses before its run directory is claimed: inputs past the model's
positions, passkey prompts longer than the context asked for, a decoding budget that cannot hold a
press's sinks and window at a prompt's length, quantizers that cannot run on the model (KIVI
groups that do not divide the heads, quanto without its package), and ``--accuracy`` tasks that
cannot be read or split. All need only the model's config and tokenizer, so a run whose
jobs load the model elsewhere (a Slurm or Ray launcher) refuses them here too, without loading the
weights; the jobs check the positions again where they load it."""

from __future__ import annotations

from ..core.errors import SinklabError
from ..core.launchers import LOCAL
from ..core.results import RunContext
from ..kvcache import QUANTIZERS
from ..models.hf import head_dim_of, read_header
from ..models.subjects import transformers_model
from .judged import check_judge
from .tasks import MIN_CONTEXT, passkey_prompts

_LOADED: dict = {}  # the model a worker (or the preflight of a local run) loaded, kept for its jobs


def model_for(cfg, subject=None):
    """The model the jobs measure: the caller's, or the configuration's, loaded once per process."""
    if subject is not None:
        return transformers_model(subject)
    key = (cfg.model, repr(cfg.load))
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = cfg.load.load(cfg.model)
    return _LOADED[key]


def check_feasible(cfg, model) -> None:
    """Refuse, in one line, a run the model (loaded, or its header) cannot do: inputs past the
    positions it was trained on (such a run goes on for long, on positions the model never saw,
    and its numbers mean nothing)."""
    trained = model.max_positions
    if trained is None or cfg.positions <= trained:
        return
    after = cfg.positions - max(cfg.contexts)  # what a run feeds after the context (positions_read)
    fed = (
        f"the {after} positions decoded after it (--decode-tokens, at least the passkey's filler, question and answer)"
        if cfg.during == "decode"
        else f"the {after} tokens fed after it"
    )
    most = trained - after
    raise SinklabError(
        f"--context {max(cfg.contexts)} reads {cfg.positions} positions (the context and {fed}) and {model.name} has "
        f"{trained}: " + (f"give --context {most} or less" if most >= MIN_CONTEXT else "too few for sinklab compress")
    )


def check_quantizers(cfg, config) -> None:
    """Each quantizer's own refusal (:meth:`~sinklab.kvcache.Quantizer.check_usable`: KIVI's groups
    must divide the head dimension, quanto needs its package), before any job fails on it."""
    for name in cfg.quantizers:
        QUANTIZERS[name].check_usable(head_dim_of(config), QUANTIZERS[name].run_values(cfg))


def check_passkeys(cfg, tokenizer) -> list[int]:
    """Build the passkey prompts of every context (the tokenizer only), which refuses a context too
    short for the template; their lengths in tokens (about the context's, a filler sentence apart)."""
    lengths = []
    if "passkey" in cfg.tasks:
        for context in cfg.contexts:
            lengths += [p.context.shape[-1] for p in passkey_prompts(tokenizer, context, cfg.keys, cfg.seed, cfg.bos)]
    return lengths


def check_decoding_budget(cfg, passkeys: list[int]) -> None:
    """A fractional ``--budget`` is a number of keys only for a prompt: the config checked every
    press at the ppl windows' prompts (the contexts); here at the passkey prompts' too, which the
    tokenizer sizes (up to a filler sentence shorter). A budget in tokens is the same for every
    prompt, checked there already."""
    if cfg.during == "decode":
        cfg.check_budget(passkeys)


def preflight(cfg, context: RunContext) -> None:
    """Before the run directory is claimed: the model's positions, what each quantizer needs, the
    passkey prompts and a decoding budget's fit at their lengths. Where the jobs run in this
    process the model is loaded here (and kept for them); where they run elsewhere only its config
    and tokenizer are read."""
    here = context.subject is not None or context.workdir is None or (context.launcher or LOCAL).launcher == "local"
    model = model_for(cfg, context.subject) if here else read_header(cfg.model, cfg.load)
    check_feasible(cfg, model)
    check_quantizers(cfg, model.config)
    check_decoding_budget(cfg, check_passkeys(cfg, model.tokenizer))
    if cfg.accuracy:
        check_judge(cfg, model.tokenizer, model.max_positions)
