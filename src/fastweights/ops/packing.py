"""Variable-length sequences packed into one row (``cu_seqlens``, flash-attention / fla convention).

``N`` sequences of lengths ``L_1..L_N`` are concatenated along time into a batch of one:
``x [1, L_1 + … + L_N, …]``, with ``cu_seqlens = [0, L_1, L_1 + L_2, …, total]`` (int64, 1-D). Each
sequence starts from its own initial state (row ``i`` of a batched ``initial_state`` of batch size
``N``, or the slow weights when ``initial_state`` is None) and nothing crosses a boundary; the final
state has one row per sequence.

:func:`run_packed` implements this for any op or layer by running each sequence separately — exact by
construction, and the reason the ops and layers need no packing code of their own. Its cost is one
call per sequence. Padded batches (``attention_mask``, :mod:`fastweights.ops.masking`) are the other
way to give sequences of different lengths; the two are not combined in one call.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from fastweights.checks import describe

__all__ = [
    "MASK_WITH_CU_SEQLENS",
    "check_cu_seqlens",
    "run_packed",
    "select_state",
    "stack_states",
    "supports_cu_seqlens",
]

#: the error for a padding mask given together with packed sequences
MASK_WITH_CU_SEQLENS = (
    "attention_mask: expected None with cu_seqlens (packed sequences have no padding), got a mask; "
    "pass either a padded batch with attention_mask or packed sequences with cu_seqlens"
)

F = TypeVar("F", bound=Callable[..., Any])


def check_cu_seqlens(cu_seqlens: object, total: int, batch_size: int) -> list[int]:
    """Validate ``cu_seqlens`` for a packed input of ``total`` steps and return it as a list of ints.

    Raises:
        ValueError: naming ``cu_seqlens`` (not a 1-D integer tensor/sequence starting at 0, ending at
            ``total`` and strictly increasing) or ``x`` (batch size is not 1).
    """
    if isinstance(cu_seqlens, Tensor):
        if cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point() or cu_seqlens.is_complex():
            raise ValueError(
                f"cu_seqlens: expected a 1-D integer tensor, got shape {list(cu_seqlens.shape)} and "
                f"dtype {cu_seqlens.dtype}"
            )
        bounds = [int(v) for v in cu_seqlens.tolist()]
    elif isinstance(cu_seqlens, Sequence) and all(isinstance(v, int) for v in cu_seqlens):
        bounds = list(cu_seqlens)
    else:
        raise ValueError(f"cu_seqlens: expected a 1-D integer tensor, got {type(cu_seqlens).__name__}")
    if batch_size != 1:
        raise ValueError(f"x: packed sequences (cu_seqlens given) need batch size 1, got {batch_size}")
    if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != total:
        raise ValueError(
            f"cu_seqlens: expected [0, …, {total}] (starting at 0 and ending at the packed length "
            f"{total} of x), got {bounds}"
        )
    if any(b >= a for a, b in zip(bounds[1:], bounds[:-1], strict=True)):
        raise ValueError(
            f"cu_seqlens: expected strictly increasing offsets (no empty sequence), got {bounds}"
        )
    return bounds


def _tensor_leaves(state: Any) -> list[Tensor]:
    if isinstance(state, Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in _tensor_leaves(v)]
    if isinstance(state, (tuple, list)):
        return [t for v in state for t in _tensor_leaves(v)]
    return []


def select_state(state: Any, index: int, batch_dim: int = 0) -> Any:
    """Row ``index`` of a batched state (tensor, tuple/list or dict of them; ints are kept) as a
    batch of one; ``batch_dim`` is the batch dimension of its tensors."""
    if state is None or isinstance(state, (int, float)):
        return state
    if isinstance(state, Tensor):
        return state.narrow(batch_dim, index, 1)
    if isinstance(state, dict):
        return {k: select_state(v, index, batch_dim) for k, v in state.items()}
    if isinstance(state, (tuple, list)):
        return type(state)(select_state(s, index, batch_dim) for s in state)
    raise TypeError(f"state: cannot select a row of a state of type {type(state).__name__}")


class _Unstackable(Exception):
    pass


def _stack(states: Sequence[Any], batch_dim: int) -> Any:
    first = states[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        if any(s.dim() != first.dim() or s.shape != first.shape for s in states):  # e.g. KV caches
            raise _Unstackable
        return torch.cat(list(states), dim=batch_dim)
    if isinstance(first, (int, float)):
        if any(s != first for s in states):
            raise _Unstackable
        return first
    if isinstance(first, dict):
        return {k: _stack([s[k] for s in states], batch_dim) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(_stack([s[i] for s in states], batch_dim) for i in range(len(first)))
    raise TypeError(f"state: cannot stack states of type {type(first).__name__}")


def stack_states(states: Sequence[Any], batch_dim: int = 0) -> Any:
    """Concatenate batch-1 states along ``batch_dim`` (inverse of :func:`select_state`).

    When the rows cannot share one batched state — tensors of different shapes (KV caches of
    different lengths) or non-tensor leaves that differ (the TTT mini-batch ``offset``) — the list of
    per-sequence states is returned instead.
    """
    try:
        return _stack(states, batch_dim)
    except _Unstackable:
        return list(states)


def run_packed(
    fn: Callable[[list[Tensor], Any], tuple[Tensor, Any]],
    inputs: Sequence[Tensor],
    cu_seqlens: object,
    initial_state: Any = None,
    *,
    batch_dim: int = 0,
) -> tuple[Tensor, Any]:
    """Run ``fn`` on every packed sequence separately and re-pack the outputs.

    Args:
        fn: ``fn(segment_inputs, state) -> (out, final_state)`` for one sequence (batch size 1);
            ``segment_inputs`` are the time slices ``[1, L_i, …]`` of ``inputs``.
        inputs: tensors ``[1, total, …]`` sliced along dim 1 (time).
        cu_seqlens: ``[N + 1]`` offsets (see the module docstring).
        initial_state: None, a batched state with ``N`` rows, or a list of ``N`` per-sequence states.
        batch_dim: the batch dimension of the state's tensors (1 for ``nn.LSTM``'s ``(h, c)``).

    Returns:
        ``(out [1, total, …], final_state)`` with ``final_state`` batched over the ``N`` sequences
        (a list of per-sequence states when they cannot share one batch, see :func:`stack_states`).

    Raises:
        ValueError: for a bad ``cu_seqlens`` (see :func:`check_cu_seqlens`), or an ``initial_state``
            without one row (or list entry) per sequence.
    """
    bounds = check_cu_seqlens(cu_seqlens, inputs[0].shape[1], inputs[0].shape[0])
    n = len(bounds) - 1
    if isinstance(initial_state, list):
        if len(initial_state) != n:
            raise ValueError(
                f"initial_state: expected one state per packed sequence ({n}), got a list of "
                f"{len(initial_state)}"
            )
    else:
        for leaf in _tensor_leaves(initial_state):
            if leaf.dim() <= batch_dim or leaf.shape[batch_dim] != n:
                raise ValueError(
                    f"initial_state: expected batch size {n} (one row per packed sequence) in dim "
                    f"{batch_dim}, got a tensor of shape {list(leaf.shape)}"
                )
    outs, states = [], []
    for i in range(n):
        segment = [x[:, bounds[i] : bounds[i + 1]] for x in inputs]
        if isinstance(initial_state, list):
            out, state = fn(segment, initial_state[i])
        else:
            out, state = fn(segment, select_state(initial_state, i, batch_dim))
        outs.append(out)
        states.append(state)
    return torch.cat(outs, dim=1), stack_states(states, batch_dim)


_OP_DOC = """
    Packing: with ``cu_seqlens = [0, L_1, …, total]``, the sequence arguments
    {names} hold ``N`` sequences back to back in a batch of one (``[1, total, …]``); each sequence
    starts from its own row of ``initial_state`` (batch ``N``, or a list of ``N`` states; ``None`` =
    the default start), nothing crosses a boundary, and the final state has one row per sequence.
    Runs one call per sequence (:func:`fastweights.ops.packing.run_packed`).
"""


def supports_cu_seqlens(*sequence_args: str) -> Callable[[F], F]:
    """Decorator: give an op ``fn(..., initial_state=None, output_final_state=False)`` a keyword
    ``cu_seqlens`` that runs it on each packed sequence of its time-major ``sequence_args``
    (``[1, total, …]``) with :func:`run_packed`."""

    def decorate(op: F) -> F:
        signature = inspect.signature(op)

        @functools.wraps(op)
        def wrapper(*args: Any, cu_seqlens: Any = None, **kwargs: Any) -> Any:
            if cu_seqlens is None:
                return op(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            if arguments.get("attention_mask") is not None:
                raise ValueError(MASK_WITH_CU_SEQLENS)
            for name in sequence_args:
                x = arguments[name]
                if not isinstance(x, Tensor) or x.dim() < 2:
                    raise ValueError(
                        f"{name}: expected a tensor [1, total, ...] with cu_seqlens, got {describe(x)}"
                    )

            def run_one(segments: list[Tensor], state: Any) -> Any:
                one = {**arguments, **dict(zip(sequence_args, segments, strict=True)), "initial_state": state}
                return op(**one)

            inputs = [arguments[name] for name in sequence_args]
            return run_packed(run_one, inputs, cu_seqlens, arguments["initial_state"])

        parameters = list(signature.parameters.values())
        parameters.append(inspect.Parameter("cu_seqlens", inspect.Parameter.KEYWORD_ONLY, default=None))
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__doc__ = (op.__doc__ or "") + _OP_DOC.format(
            names=", ".join(f"``{n}``" for n in sequence_args)
        )
        return wrapper  # type: ignore[return-value]

    return decorate
