"""Hugging Face ``transformers`` models of the library's language model (the optional extra ``[hf]``).

``import fastweights.hf`` registers the model type ``"fastweights"`` with ``AutoConfig`` and
``AutoModelForCausalLM`` (no ``trust_remote_code``), so that a saved folder loads with
``AutoModelForCausalLM.from_pretrained(folder)``:

- :class:`FastweightsConfig` (the :class:`~fastweights.models.lm.LMConfig` fields),
- :class:`FastweightsForCausalLM` (``CausalLM`` as a ``PreTrainedModel`` with ``generate()``),
- :class:`FastweightsCache` (the recurrent state ``generate()`` carries between steps),
- :mod:`fastweights.hf.convert`: ``CausalLM.save_pretrained`` folders to Hugging Face folders and back.

Nothing else in the package imports this module: without ``transformers`` only this module fails to
import (``ImportError`` naming the extra).
"""

from __future__ import annotations

try:
    import transformers
except ImportError as err:  # the optional extra is not installed
    raise ImportError(
        "fastweights.hf needs the Hugging Face extra: pip install 'fastweights[hf]' (transformers)"
    ) from err

from fastweights.hf.cache import FastweightsCache
from fastweights.hf.configuration import MODEL_TYPE, FastweightsConfig
from fastweights.hf.modeling import FastweightsForCausalLM, FastweightsPreTrainedModel

__all__ = [
    "FastweightsCache",
    "FastweightsConfig",
    "FastweightsForCausalLM",
    "FastweightsPreTrainedModel",
    "MODEL_TYPE",
    "register",
]


def register() -> None:
    """Register ``FastweightsConfig`` / ``FastweightsForCausalLM`` with ``AutoConfig`` and
    ``AutoModelForCausalLM`` under ``model_type`` ``"fastweights"``. Done at import of this module; calling
    it again changes nothing."""
    transformers.AutoConfig.register(MODEL_TYPE, FastweightsConfig, exist_ok=True)
    transformers.AutoModelForCausalLM.register(FastweightsConfig, FastweightsForCausalLM, exist_ok=True)


register()
