"""NATS credentials, TLS and the inbox prefix on every command that talks to NATS, as
NATS users expect them: `--creds FILE`, `--nkey FILE`, `--tls-ca/--tls-cert/--tls-key`,
`--inbox-prefix`, each with its `TETHER_NATS_*` variable (a user:password@ or token@ in
the URL works as it is).

The options are added to each command's signature in one place (`add_to_commands`), and
`common.nats_config` reads them: no command has to pass them along.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any

import typer


@dataclass(frozen=True)
class Credentials:
    creds: str | None = None
    nkey: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    inbox_prefix: str | None = None


_current: ContextVar[Credentials | None] = ContextVar("tether_nats_credentials", default=None)


def current() -> Credentials:
    """The credentials the running command was given (none: the defaults)."""
    return _current.get() or Credentials()


def _option(flag: str, env: str, help: str, metavar: str = "FILE") -> Any:
    return Annotated[
        str | None, typer.Option(flag, envvar=env, metavar=metavar, help=help, show_default=False)
    ]


_OPTIONS = {
    "creds": _option("--creds", "TETHER_NATS_CREDS", "NATS credentials file (user JWT + seed)."),
    "nkey": _option("--nkey", "TETHER_NATS_NKEY", "File with the nkey seed of a NATS nkey user."),
    "tls_ca": _option("--tls-ca", "TETHER_NATS_TLS_CA", "CA to verify the NATS server with."),
    "tls_cert": _option("--tls-cert", "TETHER_NATS_TLS_CERT", "Client certificate for NATS."),
    "tls_key": _option("--tls-key", "TETHER_NATS_TLS_KEY", "Key of the client certificate."),
    "inbox_prefix": _option(
        "--inbox-prefix",
        "TETHER_NATS_INBOX_PREFIX",
        "Subject prefix of this process's replies (default: _INBOX_<user> for a "
        "user:password@ URL, else _INBOX); a role may read only its own.",
        metavar="PREFIX",
    ),
}


def with_credentials(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command` with the credential options added; they hold for its whole run."""
    signature = inspect.signature(command, eval_str=True)  # the command's own names

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        given = Credentials(**{name: kwargs.pop(name, None) for name in _OPTIONS})
        token = _current.set(given)
        try:
            return command(*args, **kwargs)
        finally:
            _current.reset(token)

    extra = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in _OPTIONS.items()
    ]
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *extra]
    )
    return run


def add_to_commands(app: typer.Typer) -> None:
    """Give every command of `app` (and of its groups) that takes `--nats` the options."""
    for command in app.registered_commands:
        callback = command.callback
        if callback is not None and "nats" in inspect.signature(callback).parameters:
            command.callback = with_credentials(callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            add_to_commands(group.typer_instance)
