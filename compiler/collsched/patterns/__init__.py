"""Recurring load patterns (issue 17): arrival traces, pattern classes, predictors, the
trace report and its plots (docs/trace.md, docs/trace-format.md, docs/cache.md).

Modules: tracefile (the trace file), classes (normalised patterns, distance, clustering),
predict (predictors and their evaluation), report (the per-call-site report), plots."""
