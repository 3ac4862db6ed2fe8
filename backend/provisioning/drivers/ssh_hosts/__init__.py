"""Servers the user already has, reached over SSH (issue 32): the checks of a host pool's servers
(`host_check`). The driver that runs clusters on them comes next, in this folder, with its registry line."""
