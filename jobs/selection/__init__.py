"""Model selection: what a candidate is compared with and how the winner is chosen.

- :mod:`jobs.selection.baseline_training`: the MLlib baselines trained with Spark (the baselines job,
  ``jobs/baselines/job.py``, runs them; their model is :mod:`jobs.model.baseline`);
- :mod:`jobs.selection.sweep`: the hyperparameter sweep's candidates and the pick among them;
- :mod:`jobs.selection.blend_candidate`: the blend of the sweep's best runs as one more candidate (its
  model is :mod:`jobs.model.blend`);
- :mod:`jobs.selection.evaluation`: the evaluation report of every candidate;
- :mod:`jobs.selection.identity`: which runs belong to one training (its id, config and data fingerprints);
- :mod:`jobs.selection.bar`: the comparison table and the bar a candidate must clear (the best baseline);
- :mod:`jobs.selection.gate`: the champion gate and the human approval of a promotion.
"""
