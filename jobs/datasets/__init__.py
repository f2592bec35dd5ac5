"""The example datasets' own code, which the pipeline config names (suites, feature builders,
landing), and the scaffold that drafts a new dataset's pipeline from its CSV files."""
