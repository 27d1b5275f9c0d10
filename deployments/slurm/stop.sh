#!/usr/bin/env bash
# Stops the single-node Slurm daemons started by setup-single-node.sh.
pkill -x slurmd || true
pkill -x slurmctld || true
pkill -x munged || true
