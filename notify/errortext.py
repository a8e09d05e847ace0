"""An error as a log line or a refusal says it.

`repr` of a NATS API error is `BadRequestError()`: its code and description are only in its
`str`. Every layer that logs or answers with an error says it the same way, through here.
"""

from __future__ import annotations


def described(error: BaseException) -> str:
    """`Type: text`, or the type alone when the error has no text."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
