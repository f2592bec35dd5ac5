"""The scoring stage: the score job (:mod:`jobs.scoring.job`) writes a day's predictions with the
champion through :mod:`jobs.scoring.predictor`, :mod:`jobs.scoring.drift` measures how far the day's
inputs moved from training, and :mod:`jobs.scoring.shadow` scores the day with the challengers."""
