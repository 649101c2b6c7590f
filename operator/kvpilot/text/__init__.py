"""Text the product prints: numbers formatted exactly, external strings made safe.

Pure functions with no I/O, at the bottom of the layer stack so every package (the CLI, the
diagnoser's evidence, the demo, the operator's status messages) formats and sanitises one way.
"""
