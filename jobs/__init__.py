"""The pipeline's Spark jobs, one package per stage; the modules at this level (config, errors,
timings, tracking, registry, metrics, plots, summary) are what every stage shares."""
