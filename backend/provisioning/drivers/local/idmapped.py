"""Idmapped read-only binds of the host's programs and configuration into a node's root being built.

A node's processes run in a user namespace of their own (`namespaces.IdMap`): its root is an
unprivileged host uid. The host's `/usr` and `/etc`, owned by host root, would show there as owned by
nobody; bound with `MOUNT_ATTR_IDMAP` they show as the namespace's root's, so `sudo` is root's and
set-uid there (root of the node only), and the files of the host's system users are those users'.

Run by a node's boot as host root, before the node's user namespace exists (an idmapped mount is made by
the host's root): `python3 -I -S idmapped.py PROC 'UID_MAP' SOURCE TARGET [SOURCE TARGET ...]`, where
`PROC` is a proc mount of the caller's PID namespace (the boot runs in the node's, whose pids the host's
/proc does not show) and `UID_MAP` the namespace's map (uid_map's lines; the gids are the same). The
mapping comes from a throwaway user namespace with the same map: a mount's idmapping depends on the map,
not on which namespace holds it. Standard library only, as the boot runs it with `-S`.
"""

from __future__ import annotations

import ctypes
import os
import sys

# System call numbers, the same on every Linux architecture (the generic table).
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE = 1
_AT_EMPTY_PATH = 0x1000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NODEV, _MOUNT_ATTR_IDMAP = 0x1, 0x4, 0x100000
_CLONE_NEWUSER = 0x10000000


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def user_namespace(uid_map: str, proc: str = "/proc") -> int:
    """An fd of a new user namespace whose uid and gid maps are `uid_map` (held by a child that exits
    once the fd is open: the fd keeps the namespace); `proc` shows this process's PID namespace."""
    ready_read, ready_write = os.pipe()
    done_read, done_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side, checked through the parent
        os.close(ready_read)
        os.close(done_write)
        status = 0 if _libc.unshare(_CLONE_NEWUSER) == 0 else 1
        os.write(ready_write, b"x")
        os.read(done_read, 1)
        os._exit(status)
    os.close(ready_write)
    os.close(done_read)
    try:
        os.read(ready_read, 1)
        for table in ("uid_map", "gid_map"):
            with open(f"{proc}/{child}/{table}", "w") as handle:
                handle.write(uid_map)
        return os.open(f"{proc}/{child}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(done_write)
        os.close(ready_read)
        os.waitpid(child, 0)


def bind_idmapped(source: str, target: str, userns_fd: int) -> None:
    """Bind `source` at `target`, read-only, no devices, ids mapped through `userns_fd`'s map."""
    tree = _check(_libc.syscall(_SYS_OPEN_TREE, -100, source.encode(), _OPEN_TREE_CLONE | os.O_CLOEXEC),
                  f"open_tree {source}")
    try:
        attr = _MountAttr(attr_set=_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NODEV,
                          userns_fd=userns_fd)
        _check(_libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr),
                             ctypes.c_size_t(ctypes.sizeof(attr))), f"mount_setattr {source}")
        _check(_libc.syscall(_SYS_MOVE_MOUNT, tree, b"", -100, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH),
               f"move_mount {source} to {target}")
    finally:
        os.close(tree)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or len(argv) % 2 == 1:
        print("usage: idmapped.py PROC 'UID_MAP' SOURCE TARGET [SOURCE TARGET ...]", file=sys.stderr)
        return 2
    userns = user_namespace(argv[1], argv[0])
    for source, target in zip(argv[2::2], argv[3::2], strict=True):
        bind_idmapped(source, target, userns)
    os.close(userns)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
