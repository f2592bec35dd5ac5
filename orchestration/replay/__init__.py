"""A year in production, replayed (``make replay``): the days of the example data one after
another through the real jobs under each retraining policy, the decisions taken by the functions
the DAGs call (:mod:`~orchestration.replay.policies`, :mod:`~orchestration.replay.engine`)."""
