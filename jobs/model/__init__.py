"""Only what a logged model carries and needs to load: the default PyTorch model with its
preprocessor and pyfunc (:mod:`~jobs.model.tabular`), the MLlib baselines' and XGBoost's pyfuncs
(:mod:`~jobs.model.baseline`, :mod:`~jobs.model.booster`) and the calibration every one applies
(:mod:`~jobs.model.calibration`); it imports nothing else of ``jobs``."""
