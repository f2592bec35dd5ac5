"""The lake: its zones and names (:mod:`~jobs.lake.layout`), its small files on any URI
(:mod:`~jobs.lake.storage`), and the one SparkSession builder with the lake's file checks
(:mod:`~jobs.lake.spark`; :mod:`~jobs.lake.connect_server` runs a shared Spark Connect server)."""
