"""Distributed training, in the parts the train job (``jobs/training/job.py``) puts together.

- :mod:`jobs.training.data`: the window's days, the preprocessor fitted with Spark, and each rank's
  share of the feature Parquet (row groups read with pyarrow, labelled rows only);
- :mod:`jobs.training.stream`: a rank's share streamed through a bounded read-ahead and shuffle
  buffer (``train.data_path``), planned from the Parquet footers;
- :mod:`jobs.training.allocation`: how a rank's process allocates memory (pyarrow's pool, glibc's
  mmap threshold), set as it starts;
- :mod:`jobs.training.steps`: the step primitives of a rank (device, precision, optimizer, steps);
- :mod:`jobs.training.loop`: one TorchDistributor rank's program (``train_fn``), in named steps;
- :mod:`jobs.training.evaluation`: rank 0's part (holdout, validation, calibration, MLflow logging);
- :mod:`jobs.training.driver`: the launching process's side (rank errors, output, one rank in process);
- :mod:`jobs.training.checkpoints`: per-epoch state a retried attempt resumes from;
- :mod:`jobs.training.resources`: how many ranks, and the Spark GPU settings that give them GPUs;
- :mod:`jobs.training.publish`: the MLflow run, registration, drift baseline, champion gate and
  the training summary.
"""
