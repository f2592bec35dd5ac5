"""The scoring stage: the score job (:mod:`jobs.scoring.job`) writes a day's predictions with the
champion, and :mod:`jobs.scoring.drift` measures how far the day's inputs moved from training."""
