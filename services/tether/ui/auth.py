"""Who may use the dashboard.

- Every request must name the dashboard by an address, `localhost` or a name given with
  `--allowed-host` in its `Host`: a page on another site that rebinds its own name to
  this machine's address (DNS rebinding) is answered 421 before anything is read.
- With a token, a request must carry it (an `Authorization: Bearer` header, or the
  cookie that opening `/?token=...` once sets).
- An action must come from the dashboard's own pages: the browser's `Origin` names this
  dashboard, and the form carries the page's anti-forgery token (`csrf`).
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.bearer import matching, presented_token
from tether.http import host_name, is_address

COOKIE = "tether_ui_token"
CSRF_FIELD = "csrf"


class Guard:
    """ASGI middleware (a pure one: server-sent events stream through it untouched)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        allowed_hosts: Collection[str] = (),
    ) -> None:
        self._app = app
        self._token = token
        self._hosts = {"localhost", *(host.lower() for host in allowed_hosts)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(Request(scope)) if scope["type"] == "http" else None
        if refusal is None:
            await self._app(scope, receive, send)
        else:
            await refusal(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        """The answer to a request that may not pass, or None."""
        name = host_name(request.headers.get("host", "")).lower()
        if not (is_address(name) or name in self._hosts):
            return PlainTextResponse(
                f"misdirected: this dashboard is not {name!r}; open it by its address or "
                "localhost, or start it with '--allowed-host NAME'",
                421,
            )
        if request.method not in ("GET", "HEAD") and not _same_origin(request):
            return PlainTextResponse(
                "refused: an action must be posted from the dashboard's own page", 403
            )
        if self._token is None:
            return None
        given = request.query_params.get("token")
        if given is not None and self._matches(given):
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            target = request.url.path + ("?" + urlencode(rest) if rest else "")
            response: Response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
            return response
        presented = presented_token(request.headers.get("authorization", ""))
        if self._matches(presented) or self._matches(request.cookies.get(COOKIE)):
            return None
        return PlainTextResponse(
            "unauthorized: open the dashboard with the URL `tether ui` printed "
            "(it ends in ?token=...), or send `Authorization: Bearer <token>`",
            401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    def _matches(self, presented: str | None) -> bool:
        return self._token is not None and matching(presented, [self._token]) is not None


def _same_origin(request: Request) -> bool:
    """A browser names the page a form was posted from; a client with no browser names none."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host")
