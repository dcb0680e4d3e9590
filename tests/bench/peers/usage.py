"""CPU time and memory of process trees, from /proc: a server's children (PostgreSQL's
backends, say) count as the server's."""

from __future__ import annotations

import os
import threading
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields:
                tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def tree(pids: list[int]) -> list[int]:
    """The processes and all their live descendants."""
    children, found, todo = _children(), [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """CPU of the trees: each live process's own time and its reaped children's."""
    total = 0
    for pid in tree(pids):
        fields = _stat(pid)
        if fields:
            total += sum(int(f) for f in fields[11:15])
    return total / _TICK


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in tree(pids):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Sampler:
    """CPU used by groups of process trees over a block, and their peak summed RSS
    (sampled every `every` seconds in a thread)."""

    def __init__(self, groups: dict[str, list[int]], every: float = 0.25) -> None:
        self.groups = groups
        self.every = every
        self.cpu: dict[str, float] = {}
        self.peak_mb: dict[str, float] = dict.fromkeys(groups, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            for name, pids in self.groups.items():
                self.peak_mb[name] = max(self.peak_mb[name], rss_mb(pids))

    def __enter__(self) -> Sampler:
        self.cpu = {name: -cpu_seconds(pids) for name, pids in self.groups.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for name, pids in self.groups.items():
            self.cpu[name] += cpu_seconds(pids)
            self.peak_mb[name] = max(self.peak_mb[name], rss_mb(pids))
