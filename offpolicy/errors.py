"""The one error type users see: a clear one-line message, exit code 2 at the CLI."""


class OffpolicyError(Exception):
    """A user-facing error (bad input, unknown name, corrupt checkpoint, non-finite data).

    The CLI prints ``offpolicy: error: <message>`` on one line and exits with code 2.
    """


class NonFiniteError(OffpolicyError):
    """NaN or inf in observations, rewards, losses or parameters."""


class EnvError(OffpolicyError):
    """The environment itself raised, in ``reset()`` or ``step()`` (its exception is the
    ``__cause__``; ``OFFPOLICY_TRACEBACK=1`` makes the CLI print the whole trace)."""


def env_error(env_id: str, e: BaseException, where: str) -> EnvError:
    """``environment X raised RuntimeError at step 300: message`` (one line)."""
    text = " ".join(str(e).split())
    if len(text) > 400:
        text = text[:397] + "..."
    return EnvError(f"environment {env_id} raised {type(e).__name__} {where}"
                    + (f": {text}" if text else ""))


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says memory ran out: NumPy's ``MemoryError``, or XLA's RESOURCE_EXHAUSTED
    or 'Out of memory' (a ``JaxRuntimeError``, named here so that this module imports no JAX)."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return (type(e).__name__ in ("JaxRuntimeError", "XlaRuntimeError")
            and ("RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()))


def did_you_mean(word: str, choices, n: int = 3, cutoff: float = 0.6) -> str:
    """'; did you mean a, b?' for the choices close to ``word``, or '' (for error messages)."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)
    return f"; did you mean {', '.join(close)}?" if close else ""
