"""The one exception type users see: a one-line message, printed by the CLI with exit code 2."""


class LtsedgeError(Exception):
    """Bad input or an unusable environment. The message is one line that names the problem."""

    exit_code = 2
