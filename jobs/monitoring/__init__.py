"""The monitor of the loop: the served predictions judged on the outcomes once they land (the
``monitoring/`` zone), the estimate before they do, and the decay rule that starts a retraining.

- :mod:`jobs.monitoring.decay`: the decay verdict, a pure function of the zone's daily records.
"""
