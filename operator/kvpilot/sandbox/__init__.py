"""In-process Kubernetes API (kmock 0.8 with the gaps of testing-notes.md closed) for the demo and tests."""
