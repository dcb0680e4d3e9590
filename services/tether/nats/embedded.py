"""The embedded nats-server's secret and whereabouts, in its data dir (`.tether/`).

The server (`tether dev`, `tether.run`) takes a token kept in `<data dir>/nats-token`,
a 0600 file in a 0700 directory, so it is its owner's alone: another local user can
neither connect nor read the data. Every process of the owner's that connects to it
reads the token there, and only when its URL names that server: a loopback URL on the
port that the live server of the data dir logged (its PID and log are in the same
private directory), so the token is never sent to a server that may be someone else's.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

TOKEN_FILE = "nats-token"
STORE_DIR = "nats"
PID_FILE = "tether-nats.pid"
LOG_FILE = "nats-server.log"
DEFAULT_PORT = 4222
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_LISTENING = re.compile(r"Listening for client connections on [^\s]+:(\d+)")
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,}")
_PRIVATE = 0o700
_SECRET = 0o600


def private_dir(path: Path) -> Path:
    """`path`, created (with its parents) or tightened to 0700: an earlier Tether made it
    0755, through which any local user read the store."""
    path.mkdir(mode=_PRIVATE, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != _PRIVATE:
        try:
            path.chmod(_PRIVATE)
        except PermissionError as exc:
            raise PermissionError(
                f"{path} is readable by other local users and not yours to make private: "
                f"run 'chmod 700 {path}' as its owner, or use a data dir of your own"
            ) from exc
    return path


def write_secret(path: Path, text: str, *, replace: bool) -> bool:
    """Write `text` to `path`, readable and writable by this user alone from its first
    byte (whatever the umask), all or nothing. With `replace` False an existing file is
    kept; returns whether `path` now holds `text`."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _SECRET)
    try:
        with os.fdopen(descriptor, "w") as file:
            os.fchmod(file.fileno(), _SECRET)
            file.write(text)
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)  # create-only, and whole: a reader never sees half
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def token_of(data_dir: Path) -> str:
    """The data dir's token: made once (by whichever process comes first), then read by
    every process of its owner's. Tightens the directory and the file if they are not."""
    private_dir(data_dir)
    path = data_dir / TOKEN_FILE
    write_secret(path, secrets.token_urlsafe(32), replace=False)
    if stat.S_IMODE(path.stat().st_mode) != _SECRET:
        path.chmod(_SECRET)
    token = path.read_text().strip()
    if not _TOKEN.fullmatch(token):  # edited by hand: empty, or unfit for a config file
        token = secrets.token_urlsafe(32)
        write_secret(path, token, replace=True)
    return token


def token_for(url: str, data_dir: Path) -> str | None:
    """The token of `data_dir`'s embedded server if `url` names that server (see the
    module), else None."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if len(servers) != 1:
        return None
    parts = urlsplit(servers[0])
    if parts.username or parts.password or parts.hostname not in _LOOPBACK:
        return None
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:  # not a number: nothing listens there
        return None
    store = data_dir / STORE_DIR
    if port != logged_port(store / LOG_FILE) or live_holder(store / PID_FILE) is None:
        return None
    with contextlib.suppress(OSError):
        return (data_dir / TOKEN_FILE).read_text().strip() or None
    return None


def live_holder(pid_file: Path) -> int | None:
    """The PID in `pid_file`, if a nats-server of this user's with that PID still runs."""
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    process = Path(f"/proc/{pid}")
    with contextlib.suppress(OSError):
        if process.stat().st_uid != os.getuid():
            return None  # the PID was reused by another user's program
        if b"nats-server" not in (process / "cmdline").read_bytes():
            return None  # the PID was reused by another program
    return pid


def logged_port(log_file: Path) -> int | None:
    """The client port a nats-server's log says it listens on (the last start's)."""
    with contextlib.suppress(OSError):
        found = _LISTENING.findall(log_file.read_text(errors="replace"))
        return int(found[-1]) if found else None
    return None
