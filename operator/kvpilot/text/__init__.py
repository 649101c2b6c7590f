"""Text the product prints and reads: numbers formatted exactly, external strings made safe, YAML and
JSON documents decoded within bounds (:mod:`kvpilot.text.documents`), and the one error type for bad
input, ``field: message`` on one line (:mod:`kvpilot.text.errors`).

Pure functions with no I/O, at the bottom of the layer stack so every package (the CLI, the
diagnoser's evidence, the demo, the operator's status messages, every file a command reads) formats,
sanitises and decodes one way.
"""
