"""`python -m tether.testing.llm --script FILE.json`: serve a script until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path

import uvicorn

from tether.testing.llm.script import ScriptError, decode_script
from tether.testing.llm.server import QuietDrops, ScriptedServer


class _Server(uvicorn.Server):
    """Announces its URL once bound: the parent waits for this line (and learns port 0's port)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            host = f"[{host}]" if ":" in host else host
            print(f"listening on http://{host}:{port}/v1", flush=True)


SCRIPT_FORMAT = """\
the script (JSON):
  {"turns": [TURN, ...]}                  one conversation: turn k answers the k-th
                                          assistant turn of any request
  {"conversations": [{"match": "text", "turns": [TURN, ...]}, ...]}
                                          the first conversation whose "match" is in the
                                          first user message (one without "match": the
                                          default)
  "chunk_delay": 0.01                     seconds between streamed chunks (optional)
  "refuse_json_schema": true              answer 400 to response_format json_schema, as
                                          endpoints without structured outputs do
  "template_tools": false                 serve llama-server's /props: the chat template
                                          takes tools (true) or not (false); left out:
                                          no /props

  TURN: {"content": "text", "tool_calls": [CALL, ...], "usage": {...},
         "finish_reason": "length", "faults": [FAULT, ...]}    (all optional)
  CALL: {"name": "search", "arguments": {"query": "..."}, "id": "call_1"}
  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 0}
                        counts to report (left out: estimated)
  FAULT, for attempt n of the turn (faults[n]), exactly one of:
    {"status": 429, "retry_after": 1, "code": "...", "message": "..."}  an HTTP error
    {"drop_after": 3}     the connection breaks after 3 chunks
    {"end_after": 3}      the body ends cleanly after 3 chunks (no finish_reason)
    {"stall_after": 3, "seconds": 5}   a pause mid-stream
    {"empty": true}       a reply with no text and no tool call
    {"ok": true}          no fault
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing.llm",
        description="An offline, scripted OpenAI model.",
        epilog=SCRIPT_FORMAT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--script", type=Path, required=True, help="the script (JSON)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--log", type=Path, help="append each request to this JSON-lines file")
    parser.add_argument("--chunk-delay", type=float, help="seconds between stream chunks")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        script = decode_script(args.script.read_bytes())
    except (OSError, ScriptError) as exc:
        print(f"cannot load the script {args.script}: {exc}", file=sys.stderr)
        return 2
    app = ScriptedServer(script, chunk_delay=args.chunk_delay, log=args.log).app()
    # A stalled stream must not hold up SIGTERM for its whole stall.
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    logging.getLogger("uvicorn.error").addFilter(QuietDrops())
    _Server(config).run()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C: stopped, as asked
        sys.exit(130)
