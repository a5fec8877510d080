"""Classic continual-learning baselines trained by gradient descent in the split-benchmark harness
(the comparison of the ACL paper, Irie et al. 2025, Table 3, whose baseline numbers come from Hsu et al.
2018). One :class:`~fastweights.cl.baselines.base.Strategy` per method, one file each;
:data:`STRATEGIES` maps the method names of configs and the CLI to them."""

from __future__ import annotations

from .agem import AGEM
from .base import Finetune, Strategy
from .ewc import EWC, OnlineEWC
from .joint import Joint
from .l2 import L2
from .lwf import LwF
from .mas import MAS
from .replay import Replay
from .si import SI

__all__ = ["STRATEGIES", "Strategy"]

STRATEGIES: dict[str, type[Strategy]] = {
    "finetune": Finetune,
    "l2": L2,
    "ewc": EWC,
    "online_ewc": OnlineEWC,
    "si": SI,
    "mas": MAS,
    "lwf": LwF,
    "replay": Replay,
    "agem": AGEM,
    "joint": Joint,
}
