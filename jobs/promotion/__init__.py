"""Promotion: the sweep's chosen run registered, put to the bar and the champion gate (``jobs/promotion/job.py``)."""
