"""The example datasets' own code, which the pipeline config names: suites, feature builders, landing."""
