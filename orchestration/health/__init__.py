"""The Model health page inside the Airflow UI: the lake's monitoring zone and reports read into one
view (:mod:`~orchestration.health.view`), drawn as HTML with inline SVG (:mod:`~orchestration.health.page`),
served behind Airflow's authentication by a FastAPI app the plugin mounts (:mod:`~orchestration.health.app`)."""
