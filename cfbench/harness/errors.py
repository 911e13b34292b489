"""The one error type the CLI turns into a one-line message (what, where, what to do)."""


class CfbenchError(Exception):
    """Bad input or an unusable resource; the message names the file/field/value and the fix."""
