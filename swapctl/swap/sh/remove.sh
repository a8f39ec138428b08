#!/bin/sh
# Removes each argument (release directories, stale partial uploads).
for d; do rm -rf -- "$d"; done
