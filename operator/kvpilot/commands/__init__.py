"""One module per ``kvpilot`` subcommand; each exposes a click command named ``command``.

Conventions shared by all commands (docs/user-guide.md, "Options of every command"):

- exit 0 success; 2 bad input (invalid resource or file) with a one-line reason naming the
  field, printed to stderr via :func:`kvpilot.commands._common.fail`; never a traceback;
- ``diagnose`` has its own exit codes (0/1/2/3/64).
"""
