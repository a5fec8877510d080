"""Continual-learning metrics over an accuracy matrix, and confidence intervals.

The accuracy matrix ``R`` is a float array of shape ``[T, T]`` where ``R[i, j]`` is the accuracy
(fraction in [0, 1], or any consistent unit) on task ``j`` after learning tasks ``0..i`` in order
(Lopez-Paz & Ranzato, "Gradient Episodic Memory for Continual Learning", NeurIPS 2017). Entries on
and below the diagonal (``j <= i``) must be finite. Entries above the diagonal (``j > i``, accuracy
on a task not learned yet) are optional: NaN means "not measured"; they are only needed by
:func:`forward_transfer`.

Indices in the formulas below are 0-based, ``T`` is the number of tasks.

* ACC (average accuracy)   = (1/T)     Σ_{j=0}^{T-1} R[T-1, j]                 (Lopez-Paz & Ranzato 2017)
* BWT (backward transfer)  = (1/(T-1)) Σ_{j=0}^{T-2} (R[T-1, j] − R[j, j])     (Lopez-Paz & Ranzato 2017)
* FWT (forward transfer)   = (1/(T-1)) Σ_{j=1}^{T-1} (R[j-1, j] − b[j])        (Lopez-Paz & Ranzato 2017)
* forgetting               = (1/(T-1)) Σ_{j=0}^{T-2} (max_{l<T-1} R[l, j] − R[T-1, j])
  (Chaudhry et al., "Riemannian Walk for Incremental Learning", ECCV 2018)
* learning accuracy        = (1/T)     Σ_{j=0}^{T-1} R[j, j]

Negative BWT means forgetting; positive forgetting means forgetting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "mean_ci95",
    "t_ci95",
    "paired_difference",
    "crossed_t_ci95",
    "crossed_paired_difference",
    "VERDICTS",
    "average_accuracy",
    "backward_transfer",
    "forward_transfer",
    "forgetting",
    "learning_accuracy",
    "matrix_to_json",
    "summarize_runs",
]


def _finite_1d(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D sequence, given shape {tuple(arr.shape)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, given {int((~np.isfinite(arr)).sum())} NaN/Inf")
    return arr


def mean_ci95(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the normal-approximation 95% confidence interval.

    ``ci95 = 1.96 · std / sqrt(n)`` with the *population* standard deviation (``np.std``, ddof=0),
    the convention of the reference evaluation scripts. Note: the reference code
    (IDSIA modern-srwm ``eval_sync.py`` and automated-cl) prints ``1.96 · std / n``; dividing by ``n``
    instead of ``sqrt(n)`` is a known bug there and is *not* reproduced here.

    Args:
        values: 1-D sequence of ``n >= 1`` finite numbers (e.g. per-episode or per-run accuracies).

    Returns:
        ``(mean, ci95)`` as Python floats; ``ci95 == 0.0`` when ``n == 1``.

    Raises:
        ValueError: if ``values`` is empty, not 1-D, or contains NaN/Inf.
    """
    arr = _finite_1d(values, "values")
    return float(arr.mean()), float(1.96 * arr.std() / math.sqrt(arr.size))


def t_ci95(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the Student-t 95% confidence interval of the mean over a few independent
    repetitions (e.g. one value per training seed): ``t_{0.975, n-1} · s / sqrt(n)`` with the *sample*
    standard deviation ``s`` (ddof=1). With 3 seeds ``t = 4.30``: the interval is wide, as it should be
    for 3 samples (Student 1908; the normal 1.96 of :func:`mean_ci95` would understate it 2.2×).

    Args:
        values: 1-D sequence of ``n >= 1`` finite numbers.

    Returns:
        ``(mean, ci95)`` as Python floats; ``ci95`` is NaN when ``n == 1`` (no spread can be estimated).

    Raises:
        ValueError: if ``values`` is empty, not 1-D, or contains NaN/Inf.
    """
    from scipy.stats import t as student_t

    arr = _finite_1d(values, "values")
    n = arr.size
    if n == 1:
        return float(arr[0]), math.nan
    return float(arr.mean()), float(student_t.ppf(0.975, n - 1) * arr.std(ddof=1) / math.sqrt(n))


#: the verdicts of :func:`paired_difference`
VERDICTS = ("better", "worse", "not distinguishable")


def paired_difference(
    reference: Sequence[float] | np.ndarray,
    other: Sequence[float] | np.ndarray,
    *,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """``other`` against ``reference`` measured on the same units of repetition (the same training seeds,
    or the same evaluation streams): the per-unit differences ``other[i] - reference[i]``, their mean and
    Student-t 95% CI (:func:`t_ci95`), and a one-word verdict. ``"better"`` / ``"worse"`` only when the
    interval excludes 0 (in the direction that ``higher_is_better`` says is better); otherwise, and
    always with one unit (no interval), ``"not distinguishable"``.

    Args:
        reference, other: 1-D sequences of equal length ``n >= 1``, finite, paired by position.
        higher_is_better: whether a larger value is better (accuracy) or worse (bits per byte).

    Returns:
        ``{"mean", "ci95", "n", "verdict", "differences"}`` (``ci95`` NaN for ``n == 1``).

    Raises:
        ValueError: for empty, non-finite or unequal-length inputs.
    """
    ref, oth = _finite_1d(reference, "reference"), _finite_1d(other, "other")
    if ref.shape != oth.shape:
        raise ValueError(
            f"other: expected as many values as reference ({ref.size}, paired by position), given {oth.size}"
        )
    diff = oth - ref
    mean, ci = t_ci95(diff)
    return {
        "mean": mean,
        "ci95": ci,
        "n": int(diff.size),
        "verdict": _verdict(mean, ci, higher_is_better),
        "differences": diff.tolist(),
    }


def _verdict(mean: float, ci: float, higher_is_better: bool) -> str:
    """:data:`VERDICTS` entry of a difference ``mean ± ci``: better / worse only when the interval
    excludes 0; not distinguishable otherwise and without an interval (``ci`` NaN)."""
    if math.isnan(ci) or abs(mean) <= ci:
        return VERDICTS[2]
    return VERDICTS[0] if (mean > 0) == higher_is_better else VERDICTS[1]


def crossed_t_ci95(values: Any) -> tuple[float, float, float]:
    """Grand mean and half-width of a 95% confidence interval for a crossed two-way layout without
    replication: ``values[s, r]`` is one measurement per (level ``s`` of one factor, level ``r`` of the
    other), e.g. per (meta-training seed, shared demonstration draw), both factors random.

    Model (two-way crossed random effects, one observation per cell): ``x[s, r] = μ + a[s] + b[r] +
    e[s, r]`` with independent ``a ~ (0, σ_a²)``, ``b ~ (0, σ_b²)``, ``e ~ (0, σ_e²)``, so the grand mean
    ``x̄`` has ``Var(x̄) = σ_a²/S + σ_b²/R + σ_e²/(S·R)``. The ANOVA mean squares

    - ``MS_a = R/(S−1) · Σ_s (x̄[s,·] − x̄)²``                          (rows, ``S − 1`` df)
    - ``MS_b = S/(R−1) · Σ_r (x̄[·,r] − x̄)²``                          (columns, ``R − 1`` df)
    - ``MS_e = 1/((S−1)(R−1)) · Σ_{s,r} (x[s,r] − x̄[s,·] − x̄[·,r] + x̄)²``  (residual)

    have expectations ``σ_e² + R·σ_a²``, ``σ_e² + S·σ_b²`` and ``σ_e²`` (Searle, Casella & McCulloch 1992,
    "Variance Components", Wiley, ch. 4), so ``Var(x̄) = (E MS_a + E MS_b − E MS_e)/(S·R)`` and

        V̂ = (MS_a + MS_b − MS_e) / (S·R)                                 (unbiased for Var(x̄)),
        ν = (MS_a + MS_b − MS_e)² / (MS_a²/(S−1) + MS_b²/(R−1) + MS_e²/((S−1)(R−1))),
        ci95 = t_{0.975, ν} · sqrt(V̂),

    ``ν`` being Satterthwaite's (1946, "An approximate distribution of estimates of variance components",
    Biometrics Bulletin 2:110–114) degrees of freedom of that linear combination of independent mean
    squares — in general not an integer; it can fall below ``min(S − 1, R − 1)`` (then the interval
    widens) because ``MS_e`` enters with a minus sign.

    Fallback: when ``MS_a + MS_b − MS_e ≤ 0`` (``V̂`` not positive; this includes the all-zero case, where
    the denominator of ``ν`` is 0), the variance components are estimated by ANOVA truncated at zero,
    ``σ̂_e² = MS_e``, ``σ̂_a² = max(0, (MS_a − MS_e)/R)``, ``σ̂_b² = max(0, (MS_b − MS_e)/S)``, giving
    ``V̂ = (max(MS_a, MS_e) + max(MS_b, MS_e) − MS_e)/(S·R)`` — here equal to ``MS_e/(S·R)``, as
    ``MS_a + MS_b ≤ MS_e`` puts both below ``MS_e`` — with ``ν = min(S − 1, R − 1)``.

    Measured coverage of the nominal 95% (simulation of this model with normal effects, ``S = 3``,
    ``R = 10``, 40,000 layouts for each of nine settings of ``(σ_a, σ_b, σ_e)``: (3, 1, 1), (1, 3, 1),
    (2, 2, 1), (1, 5, 1), (5, 5, 1), (0.5, 4, 2), (0, 4, 1), (4, 0, 1), (1, 1, 3)): 0.933–0.955 in the
    first eight, 0.994 in the last, where the residual dominates and ``ν`` falls below 1 in 15% of the
    layouts. The same simulation gives 0.950–0.999 for the truncated form with ``ν = min(S − 1, R − 1)``
    throughout, and 0.40–0.95 for an interval over the seeds alone (``MS_a/(S·R)``, ``S − 1`` df), which
    leaves out the draw-to-draw spread.

    Degenerate layouts: one row (``S = 1``) gives ``V̂ = s²/R`` over the ``R`` values and ``ν = R − 1``,
    and one column (``R = 1``) ``s²/S`` and ``ν = S − 1`` — :func:`t_ci95` of that row or column.

    Args:
        values: finite numbers, shape ``[S, R]`` with ``S, R >= 1`` (a 1-D sequence is one row).

    Returns:
        ``(mean, ci95, df)``, ``df`` a float; ``ci95`` NaN and ``df`` 0 for a single value.

    Raises:
        ValueError: if ``values`` is empty, more than 2-D, or contains NaN/Inf.
    """
    from scipy.stats import t as student_t

    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"values: expected a non-empty [S, R] array, given shape {tuple(arr.shape)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"values: expected finite numbers, given {int((~np.isfinite(arr)).sum())} NaN/Inf")
    S, R = arr.shape
    grand = float(arr.mean())
    if S == 1 or R == 1:
        mean, ci = t_ci95(arr.ravel())
        return mean, ci, float(arr.size - 1)
    rows, cols = arr.mean(axis=1), arr.mean(axis=0)
    ms_a = R * float(np.sum((rows - grand) ** 2)) / (S - 1)
    ms_b = S * float(np.sum((cols - grand) ** 2)) / (R - 1)
    resid = arr - rows[:, None] - cols[None, :] + grand
    ms_e = float(np.sum(resid**2)) / ((S - 1) * (R - 1))
    combined = ms_a + ms_b - ms_e
    denominator = ms_a**2 / (S - 1) + ms_b**2 / (R - 1) + ms_e**2 / ((S - 1) * (R - 1))
    if combined > 0 and denominator > 0:
        var, df = combined / (S * R), combined**2 / denominator
    else:
        var, df = (max(ms_a, ms_e) + max(ms_b, ms_e) - ms_e) / (S * R), float(min(S, R) - 1)
    return grand, float(student_t.ppf(0.975, df) * math.sqrt(var)), df


def crossed_paired_difference(
    reference: Sequence[float] | np.ndarray,
    other: Any,
    *,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """``other`` (several training seeds) against ``reference`` (one model) on the same ``R`` shared
    units — e.g. ACL models of ``S`` meta-training seeds and a baseline, run ``r`` of every one on the
    same demonstration draw: the differences ``d[s, r] = other[s, r] − reference[r]``, their grand mean,
    the 95% CI of the crossed seeds × draws layout (:func:`crossed_t_ci95`: both the seed-to-seed and the
    draw-to-draw variability of the difference) and the verdict of :func:`paired_difference`.

    With one seed (``S = 1``) this is :func:`paired_difference` over the draws.

    Args:
        reference: shape ``[R]``, finite.
        other: shape ``[S, R]``, finite, column ``r`` paired with ``reference[r]``.
        higher_is_better: whether a larger value is better.

    Returns:
        ``{"mean", "ci95", "df", "seeds", "draws", "verdict", "differences"}`` (``differences``: the
        ``[S][R]`` nested lists; ``ci95`` NaN for a single difference).

    Raises:
        ValueError: for empty or non-finite inputs, or ``other`` not of shape ``[S, len(reference)]``.
    """
    ref = _finite_1d(reference, "reference")
    oth = np.asarray(other, dtype=np.float64)
    if oth.ndim != 2 or oth.shape[0] == 0 or oth.shape[1] != ref.size:
        raise ValueError(
            f"other: expected shape [S, {ref.size}] (seeds × the reference's draws), given {tuple(oth.shape)}"
        )
    if not np.all(np.isfinite(oth)):
        raise ValueError(f"other: expected finite numbers, given {int((~np.isfinite(oth)).sum())} NaN/Inf")
    diff = oth - ref[None, :]
    mean, ci, df = crossed_t_ci95(diff)
    return {
        "mean": mean,
        "ci95": ci,
        "df": df,
        "seeds": int(diff.shape[0]),
        "draws": int(diff.shape[1]),
        "verdict": _verdict(mean, ci, higher_is_better),
        "differences": diff.tolist(),
    }


def _check_matrix(R: Any, *, min_tasks: int = 1) -> np.ndarray:
    """Validate an accuracy matrix and return it as float64 (a copy is made only when needed)."""
    arr = np.asarray(R, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"R: expected a square 2-D array [T, T], given shape {tuple(arr.shape)}")
    T = arr.shape[0]
    if T < min_tasks:
        raise ValueError(f"R: expected at least {min_tasks} task(s), given T={T}")
    lower = arr[np.tril_indices(T)]
    if not np.all(np.isfinite(lower)):
        rows, cols = np.nonzero(~np.isfinite(np.where(np.tri(T, dtype=bool), arr, 0.0)))
        bad = list(zip(rows.tolist(), cols.tolist(), strict=True))
        raise ValueError(
            f"R: expected finite entries on and below the diagonal (j <= i), given NaN/Inf at {bad[:5]}"
            + (" ..." if len(bad) > 5 else "")
        )
    return arr


def average_accuracy(R: Any) -> float:
    """ACC = (1/T) Σ_j R[T-1, j]: mean accuracy over all tasks after learning the last one.

    Unweighted over tasks (Lopez-Paz & Ranzato 2017); Avalanche's stream accuracy weights by
    number of test samples instead.

    Args:
        R: accuracy matrix ``[T, T]`` (see module docstring).

    Raises:
        ValueError: if ``R`` is not square 2-D or has a non-finite entry with ``j <= i``.
    """
    arr = _check_matrix(R)
    return float(arr[-1].mean())


def backward_transfer(R: Any) -> float:
    """BWT = (1/(T-1)) Σ_{j<T-1} (R[T-1, j] − R[j, j]) (Lopez-Paz & Ranzato 2017).

    The influence that learning later tasks has on earlier ones; negative = forgetting. The last task
    is excluded.

    Args:
        R: accuracy matrix ``[T, T]`` with ``T >= 2``.

    Raises:
        ValueError: if ``R`` is invalid (see :func:`average_accuracy`) or ``T < 2``.
    """
    arr = _check_matrix(R, min_tasks=2)
    T = arr.shape[0]
    return float(np.mean(arr[T - 1, : T - 1] - np.diag(arr)[: T - 1]))


def forward_transfer(R: Any, baseline: Sequence[float] | np.ndarray) -> float:
    """FWT = (1/(T-1)) Σ_{j>=1} (R[j-1, j] − b[j]) (Lopez-Paz & Ranzato 2017).

    The zero-shot benefit on task ``j`` of having learned tasks ``0..j-1``, relative to ``b[j]``, the
    accuracy on task ``j`` of the model before any learning (e.g. random init / empty context).
    Needs the super-diagonal entries ``R[j-1, j]``. ~0 in class-incremental settings by construction.

    Args:
        R: accuracy matrix ``[T, T]`` with ``T >= 2`` and finite ``R[j-1, j]`` for ``j >= 1``.
        baseline: ``b``, shape ``[T]`` (``b[0]`` is not used but must be present).

    Raises:
        ValueError: if ``R`` is invalid, ``T < 2``, a super-diagonal entry is NaN/Inf, or ``baseline``
            has the wrong shape or non-finite entries (at indices ``>= 1``).
    """
    arr = _check_matrix(R, min_tasks=2)
    T = arr.shape[0]
    b = np.asarray(baseline, dtype=np.float64)
    if b.shape != (T,):
        raise ValueError(f"baseline: expected shape ({T},), given {tuple(b.shape)}")
    upper = np.array([arr[j - 1, j] for j in range(1, T)])
    if not np.all(np.isfinite(upper)):
        missing = [(j - 1, j) for j in range(1, T) if not np.isfinite(arr[j - 1, j])]
        raise ValueError(f"R: forward transfer needs finite entries R[j-1, j], given NaN/Inf at {missing}")
    if not np.all(np.isfinite(b[1:])):
        raise ValueError(f"baseline: expected finite entries at indices 1..{T - 1}, given {b.tolist()}")
    return float(np.mean(upper - b[1:]))


def forgetting(R: Any) -> float:
    """Average forgetting after the last task (Chaudhry et al. 2018, RWalk, Eq. for F_k with k = T-1).

    ``F = (1/(T-1)) Σ_{j<T-1} (max_{j<=l<T-1} R[l, j] − R[T-1, j])``: for each old task, the drop
    from its best accuracy seen *before* the final task to its accuracy after the final task. The last
    task is excluded (including it is a known bug in some implementations). The max runs over
    ``l >= j`` only — accuracies measured after task ``j`` was learned; a measured zero-shot entry
    ``R[l, j]`` with ``l < j`` is knowledge never learned and is ignored. When the upper triangle is
    not measured this is exactly Chaudhry et al.'s ``max_{l<T-1}``.

    Args:
        R: accuracy matrix ``[T, T]`` with ``T >= 2``.

    Raises:
        ValueError: if ``R`` is invalid (see :func:`average_accuracy`) or ``T < 2``.
    """
    arr = _check_matrix(R, min_tasks=2)
    T = arr.shape[0]
    drops = [arr[j : T - 1, j].max() - arr[T - 1, j] for j in range(T - 1)]
    return float(np.mean(drops))


def learning_accuracy(R: Any) -> float:
    """Learning accuracy = (1/T) Σ_j R[j, j]: mean accuracy on each task right after learning it.

    Also called "just-after-learning" or plasticity accuracy (cf. Riemer et al. 2019, LA).

    Args:
        R: accuracy matrix ``[T, T]``.

    Raises:
        ValueError: if ``R`` is invalid (see :func:`average_accuracy`).
    """
    arr = _check_matrix(R)
    return float(np.mean(np.diag(arr)))


def matrix_to_json(arr: np.ndarray) -> list[list[float | None]]:
    """Matrix ``[T, T]`` → nested lists of floats with NaN replaced by None (strict-JSON safe)."""
    return [[None if not math.isfinite(v) else float(v) for v in row] for row in arr.tolist()]


def _stats(vals: list[float]) -> dict[str, Any]:
    a = np.asarray(vals, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std()), "per_run": a.tolist()}


def summarize_runs(matrices: Sequence[np.ndarray]) -> dict[str, Any]:
    """Aggregate accuracy matrices of independent runs (e.g. disjoint demonstration sets).

    Metrics are computed per run and then averaged; ``std`` is the population std over runs
    (``np.std``, ddof=0), as automated-cl computes it (the ACL paper, App. A.4, says only "std").

    Args:
        matrices: ``n >= 1`` accuracy matrices, each ``[T, T]`` with ``T >= 2`` and the same ``T``.

    Returns:
        ``{"R": mean matrix [T][T], "R_std": std matrix [T][T], "ACC": {"mean", "std", "per_run"},
        "BWT": {...}, "forgetting": {...}, "learning_accuracy": {...}, "runs": n}`` (``per_run``: the
        metric of every run in order, for comparisons paired by run). Matrices are nested
        lists of floats with ``None`` where an entry is NaN in any run (unmeasured upper triangle), so
        the dict serialises as strict JSON.

    Raises:
        ValueError: if ``matrices`` is empty, any matrix is invalid, or the shapes differ.
    """
    if len(matrices) == 0:
        raise ValueError("matrices: expected at least one accuracy matrix, given an empty list")
    arrs = [_check_matrix(m, min_tasks=2) for m in matrices]
    shapes = {a.shape for a in arrs}
    if len(shapes) != 1:
        raise ValueError(f"matrices: expected the same shape for every run, given {sorted(shapes)}")
    stack = np.stack(arrs)
    return {
        "R": matrix_to_json(stack.mean(axis=0)),
        "R_std": matrix_to_json(stack.std(axis=0)),
        "ACC": _stats([average_accuracy(a) for a in arrs]),
        "BWT": _stats([backward_transfer(a) for a in arrs]),
        "forgetting": _stats([forgetting(a) for a in arrs]),
        "learning_accuracy": _stats([learning_accuracy(a) for a in arrs]),
        "runs": len(arrs),
    }
