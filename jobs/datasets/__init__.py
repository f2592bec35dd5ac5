"""Dataset-specific code (suites and feature builders) that the pipeline config names."""
