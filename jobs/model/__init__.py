"""Only what a logged model carries and needs to load: the default PyTorch model with its
preprocessor and pyfunc (:mod:`~jobs.model.tabular`) and the MLlib baselines' pyfunc
(:mod:`~jobs.model.baseline`); it imports nothing else of ``jobs``."""
