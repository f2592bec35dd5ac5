"""Validation, in the parts the validate job (``jobs/validation/job.py``) puts together.

- :mod:`jobs.validation.schema`: the raw files, their headers against the declared schema (schema
  drift, not to be confused with the data drift of :mod:`jobs.scoring.drift`), rows read as text;
- :mod:`jobs.validation.rows`: row rules, as Spark predicates and Great Expectations expectations;
- :mod:`jobs.validation.batch`: checks on a day's partition as a whole;
- :mod:`jobs.validation.report`: what a run found, as JSON and as an HTML page;
- :mod:`jobs.validation.writing`: the split written to the validated and quarantine zones;
- :mod:`jobs.validation.partitions`: one writer per day (locks), staging a killed run left, and
  the marks of days that failed.
"""
