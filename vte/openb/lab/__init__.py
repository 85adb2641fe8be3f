"""The FGD and PWR papers' experiments on OpenB-v0's replay: `experiment` (the replay grid
of `python -m vte.openb`), `power_experiment` (the PWR paper's), `simulator` (one replay
under one policy), `lookahead` (the planner and its settings, `PlanSettings`), `bound`
(the LP bounds), `published` (the papers' figures) and `cache` (finished runs on disk)."""
