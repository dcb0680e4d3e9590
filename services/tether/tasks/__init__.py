"""Tasks: the pure rules of a task record (`rules`) and the flows that apply them (`service`)."""
