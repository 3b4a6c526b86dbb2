"""What the compiler reads: topologies, arrival patterns, their schemas and units, the
link model derived from a topology, and the pool tree (the network as Min3 sees it)."""
