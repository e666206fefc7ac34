"""``python -m signoff.cli``: the ``signoff`` command without its console script."""

from signoff.cli import main

main()
