"""The pipeline's Spark jobs, one package per stage; the modules at this level (config, errors,
timings, tracking, metrics, plots, summary) are what every stage shares."""
