"""``python -m ekbatan.integrations.cli``: the ``ekbatan`` command without the console script."""

from ekbatan.integrations.cli import main

if __name__ == "__main__":
    main(prog_name="ekbatan")
