"""The features stage: the features job (:mod:`jobs.features.job`) builds date-partitioned feature
Parquet from the validated zone with the dataset's feature builder."""
