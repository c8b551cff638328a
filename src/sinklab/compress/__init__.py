"""``sinklab compress``: what KV-cache presses (:mod:`sinklab.kvcache`) cost in perplexity and
passkey retrieval, with and without the sink kept: :mod:`.tasks` (the inputs), :mod:`.evaluate`
(a press's row from one prefill per input), :mod:`.run` (the capability), :mod:`.frame`,
:mod:`.report`, :mod:`.plots` and :mod:`.page` (its tables and statements, figures and page)."""

from .config import READ_ONLY_WITH, check_read
from .run import COMPRESS, CompressConfig
from .tasks import CONTINUATION, positions_read

__all__ = ["COMPRESS", "CONTINUATION", "READ_ONLY_WITH", "CompressConfig", "check_read", "positions_read"]
