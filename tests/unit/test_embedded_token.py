"""The embedded server's token file: made once, the owner's alone from its first byte
whatever the umask, and offered only to the server it belongs to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.nats.embedded import TOKEN_FILE, token_for, token_of


@pytest.fixture
def open_umask() -> object:
    previous = os.umask(0)  # the worst case: nothing masked
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("open_umask")
def test_the_token_is_made_once_private_and_reused(tmp_path: Path) -> None:
    data_dir = tmp_path / "deep" / ".tether"

    first = token_of(data_dir)

    assert len(first) >= 32 and token_of(data_dir) == first
    assert _mode(data_dir) == 0o700 and _mode(data_dir / TOKEN_FILE) == 0o600
    assert sorted(p.name for p in data_dir.iterdir()) == [TOKEN_FILE]  # no temporary left


def test_an_open_dir_and_token_are_tightened_and_a_spoilt_token_replaced(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / ".tether"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    (data_dir / TOKEN_FILE).write_text('bad" } authorization { token: "x\n')
    (data_dir / TOKEN_FILE).chmod(0o644)

    token = token_of(data_dir)

    assert token.isascii() and '"' not in token and len(token) >= 32
    assert _mode(data_dir) == 0o700 and _mode(data_dir / TOKEN_FILE) == 0o600


@pytest.mark.parametrize(
    "url",
    [
        "nats://example.com:4222",  # not this machine
        "nats://alice:pw@127.0.0.1:4222",  # credentials of its own
        "nats://127.0.0.1:4222,nats://127.0.0.1:4223",  # a cluster
        "nats://127.0.0.1:4222",  # no live server in the data dir
    ],
)
def test_the_token_goes_to_no_other_server(tmp_path: Path, url: str) -> None:
    token_of(tmp_path)
    assert token_for(url, tmp_path) is None
