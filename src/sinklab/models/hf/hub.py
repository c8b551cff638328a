"""A model spec that is not a local path, read as a Hugging Face Hub id, answered in one question.

``sinklab scan my-model-dir`` with a mistyped folder name used to go to transformers as a Hub id
and spend 30 s in retries (12 lines of them) before the error. Before any download, one
``model_info`` request (no retries; the Hub's own ``HF_HUB_ETAG_TIMEOUT``) asks the Hub whether it
has the model: if it does, transformers loads it as before; if it says no, or cannot be asked and
the local Hugging Face cache does not hold the model either, the error names both readings of the
spec at once. A model the cache holds is loaded from it when the Hub cannot be asked (offline, as
``HF_HUB_OFFLINE=1`` asks, or unreachable: then warned, the cached copy may be older).
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

from ...core.errors import SinklabError


def hub_files_only_local(spec: str, revision: Optional[str]) -> bool:
    """How to load the Hub model ``spec``: False to let transformers ask the Hub (it has the model),
    True to read the local Hugging Face cache only (the Hub cannot be asked, the cache holds it).
    Anything else is a :class:`SinklabError` naming both readings of ``spec``."""
    from huggingface_hub import constants

    unreachable = _hub_unreachable(spec, revision)
    if unreachable is None:
        return False
    at = f" at revision {revision}" if revision else ""
    if not _cached(spec, revision):
        raise SinklabError(
            f"no such folder {_as_folder(spec)}, and no Hub model {spec!r}{at} in the local Hugging Face cache ({unreachable})"
        )
    if not constants.HF_HUB_OFFLINE:
        message = f"{unreachable}; loading {spec!r}{at} from the local Hugging Face cache (it may be older than the Hub's)"
        warnings.warn(message, stacklevel=2)
    return True


def _hub_unreachable(spec: str, revision: Optional[str]) -> Optional[str]:
    """None when the Hub has ``spec``; why it cannot say so when it cannot be asked; a
    :class:`SinklabError` when it answers that it has no such model (or ``spec`` is no Hub id)."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision}" if revision else ""
    try:
        HfApi().model_info(spec, revision=revision, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError:  # it exists; transformers says what access it needs
        return None
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise SinklabError(
            f"no such folder {_as_folder(spec)}, and the Hugging Face Hub has no model {spec!r}{at} "
            "(or it is private: hf auth login)"
        ) from None
    except HFValidationError:
        raise SinklabError(f"no such folder {_as_folder(spec)} (and {spec!r} is not a Hub model id)") from None
    except OfflineModeIsEnabled:
        return "the Hub is unreachable: HF_HUB_OFFLINE is set"
    except Exception as exc:  # no answer: DNS, refused, timeout, TLS, a 5xx (the classes depend on huggingface_hub's HTTP client)
        return f"the Hub is unreachable: {type(exc).__name__}"
    return None


def _cached(spec: str, revision: Optional[str]) -> bool:
    """Whether the local Hugging Face cache holds ``spec``'s config at ``revision`` (its main branch by default)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(spec, "config.json", revision=revision), str)


def _as_folder(spec: str) -> str:
    """The folder a relative spec would have named, as the user would write it."""
    return spec if os.path.isabs(spec) else os.path.join(".", spec)
