"""The task state machine shared by the dispatcher, the workers and the client."""
