"""The one exception type users see: a one-line message, printed by the CLI with exit code 2."""


class LtsedgeError(Exception):
    """Bad input or an unusable environment. The message is one line that names the problem."""

    exit_code = 2


class LostConnection(LtsedgeError):
    """The machines a measurement depended on went away (a fleet's scheduler): nothing wrong with the
    input, so exit 1; the same command resumes."""

    exit_code = 1
