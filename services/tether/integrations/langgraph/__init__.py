"""LangGraph on NATS JetStream: `JetStreamSaver`, a checkpointer that passes LangGraph's
conformance suite, usable alone (`pip install tether[langgraph]`):

```python
from tether.integrations.langgraph import JetStreamSaver

with JetStreamSaver.from_conn_string("nats://127.0.0.1:4222") as saver:
    saver.setup()
    graph = builder.compile(checkpointer=saver)
```

Its layout in JetStream (keys any NATS client reads) is in `saver`'s docstring. A
compiled graph added to an app (`app.add(graph)`) runs as a Tether task on it: `as_tool`,
imported only when asked for, so the saver alone loads no graph runtime.
"""

from typing import Any

from .bucket import SaverNotSetUpError
from .saver import JetStreamSaver, SaverContext

__all__ = ["JetStreamSaver", "SaverContext", "SaverNotSetUpError", "as_tool"]


def __getattr__(name: str) -> Any:
    if name == "as_tool":
        from .graph import as_tool

        return as_tool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
