"""Classic continual-learning baselines trained by gradient descent in the split-benchmark harness
(the comparison of the ACL paper, Irie et al. 2025, Table 3, whose baseline numbers come from Hsu et al.
2018). One :class:`~fastweights.cl.baselines.base.Strategy` per method, one file each;
:data:`STRATEGIES` maps the method names of configs and the CLI to them."""

from __future__ import annotations

from .base import Finetune, Strategy
from .ewc import EWC, OnlineEWC
from .l2 import L2
from .mas import MAS
from .si import SI

__all__ = ["STRATEGIES", "Strategy"]

STRATEGIES: dict[str, type[Strategy]] = {
    "finetune": Finetune,
    "l2": L2,
    "ewc": EWC,
    "online_ewc": OnlineEWC,
    "si": SI,
    "mas": MAS,
}
