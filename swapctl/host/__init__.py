"""Everything swapctl runs on a host, in one place: a folder per family of shell scripts (`swap/`, `facts/`,
`logs/`, `gpu/`, `remote/`), each script named once across them, and one loader (`scripts`) that sends
them with their named inputs. The parser of a script's output sits with the code that uses it."""
