"""The one exception type users see: a one-line message, printed by the CLI without traceback."""


class PlannerError(Exception):
    """A problem with the user's input (file, key or layer named in the message)."""
