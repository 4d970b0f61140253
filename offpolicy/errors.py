"""The one error type users see: a clear one-line message, exit code 2 at the CLI."""


class OffpolicyError(Exception):
    """A user-facing error (bad input, unknown name, corrupt checkpoint, non-finite data).

    The CLI prints ``offpolicy: error: <message>`` on one line and exits with code 2.
    """


class NonFiniteError(OffpolicyError):
    """NaN or inf in observations, rewards, losses or parameters."""
