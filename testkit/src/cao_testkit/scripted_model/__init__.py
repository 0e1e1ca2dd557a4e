"""A scripted stand-in for the model APIs the real coding CLIs call (test tool, no credentials).

Claude Code, Codex, qwen-code, opencode and Gemini CLI are pointed at this
server through their base-URL settings; scripts decide, per user message, what
text to answer and which tools to call across the tool loop. See ``script`` for
the script format, ``app`` for the routes and ``harness`` for the test helper.
"""

from .harness import ScriptedModelServer
from .script import ScriptError, parse_script

__all__ = ["ScriptError", "ScriptedModelServer", "parse_script"]
