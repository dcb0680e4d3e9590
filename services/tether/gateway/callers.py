"""Who calls the gateway: bearer tokens, each naming a caller, and the binding of MCP
tasks to the caller that created them (the MCP spec asks that another caller's
`tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list` neither see nor touch them).

Without tokens the gateway is open (it binds to 127.0.0.1 by default) and tasks are
bound to no one.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

from nacl.signing import SigningKey
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.agents.owners import sealed_text
from tether.bearer import matching, presented_token

CALLER = "tether_caller"
"""Where the middleware puts the caller on the request's state."""
DEFAULT_CALLER = "default"
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def parse_tokens(specs: list[str]) -> dict[str, str]:
    """`NAME=TOKEN` (or a bare `TOKEN`, for caller `default`) per item, as token -> caller."""
    tokens: dict[str, str] = {}
    for spec in specs:
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            name, _, token = item.partition("=")
            if not (token and _NAME.fullmatch(name)):  # a bare token (base64 may end in =)
                name, token = DEFAULT_CALLER, item
            tokens[token] = name
    return tokens


def seal_key(tokens: Mapping[str, str], secret: str | None = None) -> bytes | None:
    """The key that seals a task to its caller (None: no tokens, no callers).

    `secret` (`--seal-key`, the same on every replica) is the key's source. Without one,
    the key is drawn from all the tokens through scrypt: only gateways with the same
    tokens (its replicas) can seal, a caller who knows only its own token cannot, and
    each guess at the tokens from a stored seal costs a scrypt (use long random tokens,
    or a seal key)."""
    if not tokens:
        return None
    if secret:
        return hashlib.sha256(b"tether-mcp-caller\n" + secret.encode()).digest()
    material = "\n".join(sorted(tokens)).encode()
    return hashlib.scrypt(material, salt=b"tether-mcp-caller", n=2**14, r=8, p=1, dklen=32)


@functools.lru_cache(maxsize=8)
def _signing(key: bytes) -> SigningKey:
    """The Ed25519 key drawn from the seal key: every replica with the same seal key has it."""
    return SigningKey(hmac.new(key, b"ed25519 seal", hashlib.sha256).digest())


def public_key(key: bytes) -> str:
    """The public half of the gateway's sealing key (hex): what a task's binding names."""
    return bytes(_signing(key).verify_key).hex()


def seal(key: bytes, task_id: str, caller: str) -> str:
    """The proof, kept in the task's metadata, that this gateway bound `task_id` to `caller`:
    an Ed25519 signature (hex) of both. Any NATS client can write `metadata.mcp.caller`,
    none can write a matching seal; anyone, a worker too, can check one (`owners.signed`)."""
    return _signing(key).sign(sealed_text(task_id, caller)).signature.hex()


def sealed_by_hmac(key: bytes, task_id: str, caller: str, proof: object) -> bool:
    """A seal made before seals were signatures (an HMAC, with no `key` beside it), which
    only the gateway can check: such a task stays its caller's at the gateway, and no
    worker takes it for anyone's (a follow-up of it fails)."""
    made = hmac.new(key, f"{task_id}\n{caller}".encode(), hashlib.sha256).hexdigest()
    return isinstance(proof, str) and hmac.compare_digest(proof, made)


class BearerAuth:
    """ASGI middleware: a request must carry one of `tokens` (token -> caller) as
    `Authorization: Bearer <token>`; its caller is then on `request.state`."""

    def __init__(self, app: ASGIApp, tokens: Mapping[str, str]) -> None:
        self._app = app
        self._tokens = dict(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        caller = self._caller(Headers(scope=scope).get("authorization", ""))
        if caller is None:
            refusal = JSONResponse(
                {"error": "unauthorized: send Authorization: Bearer <token>"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="tether"'},
            )
            await refusal(scope, receive, send)
            return
        scope.setdefault("state", {})[CALLER] = caller
        await self._app(scope, receive, send)

    def _caller(self, header: str) -> str | None:
        token = matching(presented_token(header), self._tokens)
        return None if token is None else self._tokens[token]


def caller_of(ctx: Any) -> str | None:
    """The caller of an MCP request (None when the gateway takes no tokens)."""
    state = getattr(getattr(ctx, "request", None), "state", None)
    return getattr(state, CALLER, None) if state is not None else None
