"""See kvpilot/__init__.py for this package's job."""
