"""The performance lab: SimGrid SMPI platforms from topologies, benchmark runs, reports."""
