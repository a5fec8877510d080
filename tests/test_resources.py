"""The machine's memory and the one-line refusal of sizes that cannot fit (``fastweights.resources``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastweights import resources
from fastweights.resources import check_fits, format_bytes, memory_limit


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (812, "812 B"), (25_300_000_000, "25.3 GB"), (2**63, "9.2 EB"), (1.2e22, "1.2e+22 B")],
)
def test_format_bytes(n: float, text: str) -> None:
    assert format_bytes(n) == text


def test_the_cpu_limit_is_the_smaller_of_physical_memory_and_the_cgroup_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resources, "_physical_memory", lambda: 64 * 10**9)
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(resources, "_CGROUP_LIMITS", (limit,))
    limit.write_text("max\n")  # cgroup v2 without a limit
    assert memory_limit() == (64 * 10**9, "the physical memory of this machine")
    limit.write_text("8000000000\n")
    assert memory_limit("cpu") == (8 * 10**9, "this container's memory limit (cgroup)")
    assert memory_limit()[0] == 8 * 10**9 and memory_limit()[0] > 0


def test_check_fits_names_the_key_the_estimate_and_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "memory_limit", lambda device="cpu": (16 * 10**9, "the test machine"))
    check_fits("model.d_ff=1000", 16 * 10**9, "the weights")  # exactly the limit fits
    with pytest.raises(
        ValueError,
        match=r"^model\.d_ff=10\*\*9: the weights need at least 16\.0 GB, more than the 16\.0 GB of the "
        r"test machine; reduce it$",
    ):
        check_fits("model.d_ff=10**9", 16 * 10**9 + 1, "the weights", hint="reduce it")
    monkeypatch.setattr(resources, "memory_limit", lambda device="cpu": None)
    check_fits("model.d_ff=10**30", 10**40, "the weights")  # unknown memory: nothing is refused
