"""cuzk's log format: its lines (patterns), TIMELINE lines cut by other lines put back (mender), the C++
calls given to their GPU (calls), the GPU phases (timeline), one daemon run (run) and a log of several (log),
their figures (report), and files read on every core (files). The rest of swapctl reads it through
logs/timings.py."""
