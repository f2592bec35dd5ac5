"""The lake: its zones and names (:mod:`~jobs.lake.layout`), its small files on any URI
(:mod:`~jobs.lake.storage`), its partitions and files read through a job's session
(:mod:`~jobs.lake.files`) and checked before they are read (:mod:`~jobs.lake.integrity`), the raw
zone's empty partitions (:mod:`~jobs.lake.raw`)."""
