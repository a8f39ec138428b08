#!/bin/sh
# Ends a session swapctl stopped waiting for: every process in session $session (what the command started in
# other process groups too), not those that left it with setsid (a daemon, the GPU sampler).
: "${session?}"
pkill -KILL -s "$session" 2>/dev/null; kill -KILL -- "-$session" 2>/dev/null; exit 0
