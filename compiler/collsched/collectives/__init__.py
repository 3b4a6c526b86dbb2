"""Collectives beyond allgather: alltoall, bcast, reduce and allreduce (issue 18).

program.py is the IR (per rank, ops carrying lists of pieces, receive-and-reduce);
algorithms/ the generators; verify.py the proof (contribution sets); model.py and
fluid.py the cost models; bounds.py the lower bounds; schedfile.py the file format 1.2;
compile.py the job the CLI runs. docs/collectives.md describes them.
"""
from .program import (COLLECTIVES, KIND_NAMES, RECV, RECV_REDUCE, REDUCING, ROOTED, SEND,
                      Builder, Op, Piece, Program, from_op_lists, piece_units, segment_bounds)

__all__ = ["COLLECTIVES", "KIND_NAMES", "RECV", "RECV_REDUCE", "REDUCING", "ROOTED", "SEND",
           "Builder", "Op", "Piece", "Program", "from_op_lists", "piece_units",
           "segment_bounds"]
