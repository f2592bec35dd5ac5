"""The Spark runtime every job runs in: the one SparkSession builder with its settings and logging
(:mod:`~jobs.runtime.spark`), the GPU discovery script, the shared Spark Connect server
(:mod:`~jobs.runtime.connect_server`) and the class archive spark-submits start from
(:mod:`~jobs.runtime.class_archive`); it knows nothing of the stages."""
