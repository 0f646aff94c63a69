"""The worker process: composition root, lifecycle and the processing loop."""
