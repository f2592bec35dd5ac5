"""Model selection: what a candidate is compared with and how the winner is chosen.

- :mod:`jobs.selection.baselines`: the MLlib baselines (the baselines job, ``jobs/baselines/job.py``, runs them);
- :mod:`jobs.selection.sweep`: the hyperparameter sweep's candidates and the pick among them;
- :mod:`jobs.selection.evaluation`: the evaluation report of every candidate;
- :mod:`jobs.selection.identity`: which runs belong to one training (its id, config and data fingerprints);
- :mod:`jobs.selection.bar`: the comparison table and the bar a candidate must clear (the best baseline);
- :mod:`jobs.selection.gate`: the champion gate and the human approval of a promotion.
"""
