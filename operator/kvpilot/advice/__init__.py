"""Predictions: a diagnosed window replayed in the engine model, checked against the window, and what-ifs.

The layer between the commands and hook (above) and ``kvpilot.diagnose`` / ``kvpilot.engine`` (below), the
one package that uses both: :mod:`kvpilot.advice.fit` (the workload from the window's metrics),
:mod:`kvpilot.advice.server` (flags and step time), :mod:`kvpilot.advice.simulate` (the engine run and its
measurement), :mod:`kvpilot.advice.observe` / :mod:`kvpilot.advice.prediction` (``P``, observed and predicted),
:mod:`kvpilot.advice.whatif` (changes), :mod:`kvpilot.advice.advise` (one target), :mod:`kvpilot.advice.run`
(a whole diagnosis, then its predictions). docs/diagnosis.md, "Predictions".
"""
