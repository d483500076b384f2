"""`tandem bench`: the speed-up measured (speedup.py), by method, under load, on the agent workload."""
