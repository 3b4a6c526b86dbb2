"""Closed forms of the DAG model for the ring and spreading on a homogeneous cluster
(docs/compact-model.md): alpha-beta terms in the model's own semantics, a cross-check of
the class DAG (model_sym), which gives every case exactly; these only the cases below.

Pieces of m = B / nseg bytes (nseg dividing B), latency L, bandwidth b, constant costs,
no TCP-window cap (os = g = m / b), every rank arriving at 0; h = L + m / b.

- ring, FIFO-marked pieces: every piece a rank sends goes to its right neighbour, and a
  FIFO send waits for the previous one on that link to end: one chain of (P - 1) nseg
  whole transfers, T = (P - 1) nseg h.
- ring, unmarked pieces: a step's first piece goes once the previous step's first piece
  has arrived (h later) and the port has sent the previous step's nseg pieces (nseg m / b
  later), so steps are max(h, nseg m / b) apart; the last step's pieces follow its first
  at the port's pace: T = (P - 2) max(h, nseg m / b) + h + (nseg - 1) m / b.
- spreading, unmarked pieces: every rank sends its own pieces, nothing waits but the
  ports: the last of the (P - 1) nseg pieces into a rank starts at ((P - 1) nseg - 1) m / b,
  T = L + (P - 1) nseg m / b (the receive port's bound, met).
"""
from __future__ import annotations


def closed_form(algorithm: str, p: int, nseg: int, nbytes: int, latency: float, bandwidth: float,
                fifo: bool) -> float | None:
    """T of the cases in the module docstring, or None for any other."""
    if p < 2 or nbytes % nseg:
        return None
    m = nbytes / nseg
    h = latency + m / bandwidth
    if algorithm == "ring":
        if fifo:
            return (p - 1) * nseg * h
        return (p - 2) * max(h, nseg * m / bandwidth) + h + (nseg - 1) * m / bandwidth
    if algorithm == "spreading" and not fifo:
        return latency + (p - 1) * nseg * m / bandwidth
    return None
