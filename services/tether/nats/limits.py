"""What fits in one NATS message: the payload plus its headers, as the server counts them.

nats-py compares only the payload with `max_payload`; the server adds the header
block, answers `-ERR maximum payload exceeded` and closes the connection, which
nats-py then never reopens. So every publish is measured here first.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.errors import MessageTooLargeError

_HEADER_LINE = len(b"NATS/1.0\r\n")
_CRLF = 2
VALUE_RESERVE = 16 * 1024
"""Room kept free beside a stored value (record, checkpoint, memo): a reply that carries
one, with its headers and envelope, must always fit in a message."""


def message_size(data: bytes, headers: Mapping[str, str] | None) -> int:
    """Bytes the server counts against `max_payload`: headers block plus payload."""
    if not headers:
        return len(data)
    block = _HEADER_LINE + _CRLF
    for key, value in headers.items():
        block += len(key.encode()) + len(value.encode()) + 2 + _CRLF  # "Key: Value\r\n"
    return block + len(data)


def check_message(
    subject: str, data: bytes, headers: Mapping[str, str] | None, max_payload: int
) -> None:
    """Raise MessageTooLargeError before sending what the server would refuse."""
    size = message_size(data, headers)
    if size > max_payload:
        raise MessageTooLargeError(f"a message on {subject}", size, max_payload)


def check_value(what: str, data: bytes, max_payload: int) -> None:
    """Raise MessageTooLargeError for a stored value that leaves no room for its replies."""
    limit = max_value(max_payload)
    if len(data) > limit:
        raise MessageTooLargeError(what, len(data), limit)


def max_value(max_payload: int) -> int:
    """The largest record, checkpoint or memo Tether stores under `max_payload`."""
    return max_payload - VALUE_RESERVE
