"""Long chaos runs, outside pytest: `just chaos` (a 3-node cluster losing nodes) and
`just soak` (a steady mix while workers die). Each prints a report and exits non-zero
when a task was lost or a checkpointed step ran again."""
