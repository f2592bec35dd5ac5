"""What the DAGs import besides Airflow: the one Spark job factory (:mod:`~orchestration.spark_jobs`),
the Assets and the Python tasks between Spark jobs (:mod:`~orchestration.tasks`,
:mod:`~orchestration.sweep_tasks`). Installed with the project; Airflow's plugins folder holds only
the plugin class (``plugins/lakeflow.py``)."""
