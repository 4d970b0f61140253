"""``python -m offpolicy``: the ``offpolicy`` command (:func:`offpolicy.cli.main`)."""

from offpolicy.cli import main

if __name__ == "__main__":  # also imported, not run, by --async-envs' fork server
    raise SystemExit(main())
