"""Deploys: which build of the code runs which step, and the operator's say in it.

- `naming`: a worker's build, named by its operator or by what it serves.
- `served`: what deploys read of a tool (a `Protocol`: no dependency on `tether.tools`).
- `shapes`, `compat`: what a build's tools take and return; whether a new one fits the old.
- `announcing`: a worker writes its build's tool shapes, once per tool.
- `routing` (pure), `fleet`: the builds a process knows of, and where a step goes.
- `rollout`: a worker's part in a deploy (announce, follow, move steps off gone builds).
- `listing`, `actions`: `tether builds` and its ramp, promote and rollback.
- `forgetting`: the builds `tether gc` forgets.

A worker's drain is the host's (`tether.worker.draining`); it asks the fleet here.
"""
