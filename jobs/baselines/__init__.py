"""The MLlib baselines job: the bar a trained candidate must clear, fitted on its window (``jobs/baselines/job.py``)."""
