"""Sessions: one conversation across many runs, keyed on the app's own id.

- `decisions` (pure): what a session does with what came to its inbox and with its run's end.
- `runner`: the dispatchers bring each session up to date with that rule, written ahead.
- `following`: a follower follows a session, not a task, resuming from a position.
- `session`: `Session`, the Python door (`Client.session`).
"""

from tether.sessions.following import Position, SessionUpdate
from tether.sessions.session import Session

__all__ = ["Position", "Session", "SessionUpdate"]
