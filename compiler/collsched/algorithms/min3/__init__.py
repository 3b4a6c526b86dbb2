"""Min3-Allgather (Gupta & Vadhiyar, HPDC 2007, Figures 3-7), optionally arrival-aware.

Down the pool tree (pools.py), top first, each pool schedules the transfers that give every
one of its sub-pools one copy of every piece (ScheduleInputPool, Fig. 5): among all
(piece, sub-pool lacking it) the transfer that would *complete* first is taken (FindMin,
Fig. 4: best source among the pool's holders of the piece, best receiver in the sub-pool),
the hosts' port times are updated (UpdateAfterSched, Fig. 6) and the search repeats. The
sub-pools then recurse with the piece's new holder inside each as its source (Fig. 7).
Each piece thus enters each pool exactly once: the schedule is wide-area optimal.

Transfer times follow the simulator's cost model (docs/semantics.md), so that what the
scheduler plans is what `simulate` predicts: Eq. 1-3 with send overhead os(m), gap g(m),
a receive port that frees when the bytes have landed, FIFO links where policy.py marks them,
and the moment the sender holds the piece (the paper's FindMin leaves that implicit).

Arrival-aware (Request.arrivals): a rank sends nothing before it arrives (its send port,
and its own piece, become available at its arrival), but it may receive before: those
receives are the leading part of its list and run in the background (ir.BACKGROUND).
Where one flow fills a sender's port (a cluster: policy.serial_list_schedule), the plan
is made for serial execution - a send holds its port until its message has arrived, a
receive does not overlap the previous one - and the schedule is marked serial, so that
an early rank's sends do not leave all at once and share its NIC. In full duplex such a
plan also lets a rank relay pieces it received in the background before it arrives
(background sends, which the PAT engine runs for serial schedules); only its own piece
waits for its arrival.

Ordering: every op gets the planned start time of its transfer as its sort key (ties:
the order in which the greedy took the transfers). A forwarded piece leaves after it
arrived, so this one global order makes every wait point backwards: no deadlock, also
under the PAT engine's serial execution, and the k-th send a->b meets the k-th recv at b
from a. Each port's ops start in the order the greedy took them (the ring engine's
backfilled ops are checked against their neighbours in start order instead), so the
simulator sees the ports as planned: its prediction is never later than the plan. One
exception: the simulator orders each shared WAN link by its own start times, and lets a
flow queued at a link release its ports early (the planner does not); a transfer it starts
earlier than planned may then take a link first and delay another, and the prediction
comes out a little after the plan (docs/grid.md, "Order of the lists", has the figures;
tests/compiler/test_min3.py the case hypothesis found). The runtime does the same as the
simulator - it posts the send once it may - so the simulator
is the one to believe, and `compile` reports its prediction.

Three engines, one rule (the transfer that completes first is taken; ties go to the
piece of the receiver's nearest ring predecessor; between receivers of a small pool of
single ranks to the lower rank, or in a serial plan to the one lacking the most pieces,
see docs/grid.md):
- pools of pools: the paper's heap over (piece, sub-pool); FindMin on Python lists in
  small pools, with numpy and per-site receiver sides shared by all holders in large ones;
- small pools of single ranks: the same greedy with one heap entry per receiving rank;
- large pools of single ranks (thousands of pieces per rank pair): a pipelined ring in
  arrival order (_schedule_ring) when the pool is full duplex with equal arrivals, else
  vectorized rounds in which every receiver takes the earliest transfer it can get and
  every sender serves one receiver (_schedule_rounds).

The ring is the one engine that departs from "completes first": in a large site whose WAN
pieces trickle in over shared links, the greedy rounds left the receiving ports idle
about half the time (docs/grid.md, "The ring engine"); every ring link
carries about one piece per rank, so it stays near the port bound. It also places its
transfers into the gaps the pools above left in a port's timeline (backfilling), checked
against the neighbours in list order exactly as the simulator will see them.

Modules, one concept each: model.py (the cost model's per-pair costs and port state the
engines update, and the plan they append to), input_pool.py (pools of pools), leaf_pool.py
(small pools of single ranks), rounds.py and ring.py (large pools of single ranks), and
schedule.py (the recursion down the pool tree, and the schedule built from the plan; it
registers the algorithm). Each engine's `*_kernel` function calls its C kernel
(collsched.kernels); its Python twin is the reference the tests compare it with. The
schedule keeps its transfers' global order (Schedule.transfers), from which the pipeline's
receive gating re-sorts the lists (collsched.passes); the algorithm neither gates nor
verifies anything itself.
"""
from __future__ import annotations

from .model import _Model, _Plan  # noqa: F401 - the package's API (tests build plans)
from .schedule import build, pool_schedule  # noqa: F401 - registers "min3"
