"""``python -m orchestration.replay``: see :mod:`orchestration.replay.engine`."""

from orchestration.replay.engine import main

if __name__ == "__main__":
    main()
