"""The `local` driver's host layer: real nodes as namespaces on this Linux machine (root only)."""
