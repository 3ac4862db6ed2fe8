"""The node agent: what runs on each node and reports what is real there.

GPUs through `nvidia-smi -q -x`, XID events from the kernel log, CPU and memory from /proc. Standard
library only, because it runs inside nodes where nothing but Python is installed; a node without GPUs
says so and reports no GPU numbers. `python -m backend.node_agent` prints one reading as JSON.
"""
