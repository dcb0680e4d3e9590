"""Who may use the dashboard: with a token, a request must carry it (an `Authorization:
Bearer` header, or the cookie that opening `/?token=...` once sets); an action must
come from the dashboard's own pages, whatever the token (no cross-site form posts)."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tether.bearer import matching, presented_token

COOKIE = "tether_ui_token"


class TokenAuth:
    """ASGI middleware (a pure one: server-sent events stream through it untouched)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self._app = app
        self._token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(Request(scope)) if scope["type"] == "http" else None
        if refusal is None:
            await self._app(scope, receive, send)
        else:
            await refusal(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        """The answer to a request that may not pass, or None."""
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
