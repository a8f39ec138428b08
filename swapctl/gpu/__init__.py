"""The GPU's own view: samples nvidia-smi records on the host while the daemon runs, and their parsers."""
