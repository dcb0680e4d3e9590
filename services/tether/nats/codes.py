"""JetStream's error codes (`err_code` in an API reply) that Tether decides on.

Match a NATS failure on these numbers, never on its description's words.
"""

WRONG_LAST_SEQUENCE = 10071
"""A compare-and-set lost: the subject's last sequence was not the one expected."""
WRONG_LAST_MSG_ID = 10070
WRONG_LAST_SEQUENCE_KV = 10164
"""The same, as a key-value bucket reports it for a create on a key that exists."""
LOST_COMPARE_AND_SET = frozenset({WRONG_LAST_SEQUENCE, WRONG_LAST_SEQUENCE_KV})
STREAM_NOT_FOUND = 10059
CONSUMER_NOT_FOUND = 10014
NO_MESSAGE_FOUND = 10037
MESSAGE_DELETE_FAILED = 10057
"""A message delete that did not happen: on a stream that allows deletes, because the
message is gone already."""
SEQUENCE_NOT_FOUND = 10043
"""`sequence N not found`: a delete of a message that is not there (seen after failovers)."""
STREAM_NAME_IN_USE = 10058
MAX_MESSAGES_PER_SUBJECT = 10077
"""A second message on a subject of a stream that keeps one, discarding new ones."""
ROLLUP_NOT_PERMITTED = 10111
"""A message with `Nats-Rollup` on a stream that refuses rollups."""
JETSTREAM_NOT_ENABLED = 10076
UNAVAILABLE = 503
"""The `code` (an HTTP-like status) of "JetStream is not ready": an outage, not a refusal."""

MESSAGE_GONE = frozenset({NO_MESSAGE_FOUND, MESSAGE_DELETE_FAILED, SEQUENCE_NOT_FOUND})
"""What a delete of a message that is not there answers."""
