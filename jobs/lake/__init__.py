"""The lake: its zones and names (:mod:`~jobs.lake.layout`), its small files on any URI
(:mod:`~jobs.lake.storage`) and the checks of its partitions (:mod:`~jobs.lake.integrity`)."""
