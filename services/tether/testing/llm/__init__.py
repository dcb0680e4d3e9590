"""An offline, scripted OpenAI-compatible model server, run as its own process.

`python -m tether.testing.llm --script FILE.json` serves `/v1/chat/completions` from the
script (see `script.py` for its format); `ScriptedModel` runs it as a child process.
"""

from tether.testing.llm.process import ScriptedModel
from tether.testing.llm.script import Script, ScriptError

__all__ = ["Script", "ScriptError", "ScriptedModel"]
