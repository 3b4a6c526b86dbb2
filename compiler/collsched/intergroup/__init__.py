"""Intergroup allgather / allgatherv planning core (issue 19; docs/intergroup.md).

Pure functions over two groups of ranks (groups.py): the plans of Kang et al. 2019
(kang.py: Algorithm 1 and 2; rootgather.py: the root gathering baselines of Eq. 1 and
Eq. 2), a checker (check.py), the paper's single-port time model and bounds (cost.py) and
the size rules of its experimental settings (sizes.py). No dependency on the schedule IR.
"""
from .check import Audit, Violation, audit, check, check_plan
from .cost import Timing, simulate, time_of
from .groups import A, B, Groups, Transfer, even_cuts
from .kang import plan_kang, plan_kang_v
from .plan import Plan, PlanInfo
from .rootgather import plan_root_gather, plan_root_gather_mpich

PLANS = {
    "kang": plan_kang,
    "kang-v": plan_kang_v,
    "root-gather": plan_root_gather,
    "root-gather-mpich": plan_root_gather_mpich,
}

__all__ = ["A", "B", "Audit", "Groups", "PLANS", "Plan", "PlanInfo", "Timing", "Transfer",
           "Violation", "audit", "check", "check_plan", "even_cuts", "plan_kang",
           "plan_kang_v", "plan_root_gather", "plan_root_gather_mpich", "simulate",
           "time_of"]
