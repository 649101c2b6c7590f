"""Test support: real servers on loopback, started and stopped by PID."""
