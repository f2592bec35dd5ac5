"""What the DAGs import besides Airflow: the one Spark job factory (:mod:`~orchestration.spark_jobs`),
the Assets (:mod:`~orchestration.assets`), the decisions the tasks and the replay share
(:mod:`~orchestration.decisions`) and each DAG's Python tasks between Spark jobs
(:mod:`~orchestration.ingest_tasks`, :mod:`~orchestration.score_tasks`, :mod:`~orchestration.train_tasks`,
:mod:`~orchestration.sweep_tasks`). Installed with the project; Airflow's plugins folder holds only
the plugin class (``plugins/lakeflow.py``)."""
