"""Training/evaluation mode switches of a module.

:func:`eval_mode` is the library's one "evaluate, then put the model back as it was" block: the
protocols and evaluators of ``cl`` and the generation loop of ``models.lm`` run their model in eval
mode (dropout off, norms on running statistics) and restore its previous mode afterwards, also when
the evaluation raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["eval_mode"]


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in eval mode for the ``with`` block, then back into its previous mode.

    On entry ``model.training`` is remembered and ``model.eval()`` called; on exit — normal, by an
    exception, or (inside a generator) when the generator is closed — ``model.train(previous)`` is
    called. Like ``nn.Module.train``, the restore sets every submodule to the top module's previous
    mode (a submodule that was in a different mode before is not restored individually). Exceptions
    propagate unchanged.

    Args:
        model: any :class:`torch.nn.Module`; its parameters, buffers and gradients are not touched.

    Yields:
        ``model`` itself (in eval mode).
    """
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
