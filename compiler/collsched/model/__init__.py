"""The cost models: the single-port simulator, the fluid model, the LP lower bound, the
FIFO/segment policy the models decide, and the work budget of a compile job."""
