"""The demo: a research-report agent that survives the crash of its worker."""
