"""The Spark runtime every job runs in: the one SparkSession builder with its settings and logging
(:mod:`~jobs.runtime.session`), the GPUs it asks for (:mod:`~jobs.runtime.gpu`), the shared Spark
Connect server (:mod:`~jobs.runtime.connect_server`) and the class archive spark-submits start from
(:mod:`~jobs.runtime.class_archive`); it imports nothing of the lake or the stages."""
