"""``python -m fastweights …``: the same command line as ``fastweights …`` and ``python -m
fastweights.cli …`` (e.g. under ``torchrun -m fastweights``)."""

from fastweights.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
