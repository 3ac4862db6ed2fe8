"""The data dir (`GPUCLOUD_DATA_DIR`) is checked, created and tightened before any command uses it.

It holds the SQLite database, `secret.key` and the local driver's state: whoever can write to it, or
swap it for a directory of their own, owns the cloud (a planted database brings its own admin key). So,
on the path as the kernel walks it (every symbolic link followed):

- the data dir is a directory owned by the user running the backend and writable by nobody else; its
  database files and key are regular files of that user, writable by nobody else. A missing data dir is
  created 0700 (missing parents 0755); one that others can only read (older installs: 0755 directory,
  0644 database) is tightened in place to 0700 and 0600.
- every directory on the way is owned by root or that user and writable by nobody else, with one
  exception: a root-owned directory with the sticky bit (/tmp, /var/tmp: mode 1777) is accepted, because
  the sticky bit stops other users from renaming or removing our entry in it (and an entry someone else
  made first is refused by the owner rule above).
- every symbolic link on the way is owned by root or that user (its owner can repoint it at any time).

A refusal changes nothing: `prepare_data_dir` checks before it creates or tightens anything.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Sequence
from pathlib import Path

from backend.store.secrets import KEY_FILE

DATABASE_FILE = "gpucloud.db"
PRIVATE_FILES = (DATABASE_FILE, f"{DATABASE_FILE}-wal", f"{DATABASE_FILE}-shm", KEY_FILE)
_MAX_LINKS = 40  # the kernel's limit too (ELOOP)
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
_OTHERS_ANY = stat.S_IRWXG | stat.S_IRWXO


class DataDirError(Exception):
    """The data dir is unsafe: the message names the path, what is wrong and the fix."""


def data_dir_problems(path: Path) -> list[str]:
    """Why `path` is unsafe as the data dir: one sentence with its fix per offending path, outermost
    first; empty when it is safe (or missing and safe to create). Changes nothing."""
    return _check(path)[1]


def prepare_data_dir(path: Path, *, create: bool = True) -> list[str]:
    """Refuse an unsafe data dir (DataDirError, nothing created or changed), create a missing one 0700
    when `create`, and tighten one that others can read; returns what was tightened, e.g.
    `/srv/gpucloud 0755 -> 0700`, for the caller to report."""
    real, problems = _check(path)
    if not problems and create and not real.exists():
        try:
            for parent in reversed(real.parents):
                if not parent.exists():
                    parent.mkdir(mode=0o755, exist_ok=True)
            real.mkdir(mode=0o700, exist_ok=True)
        except OSError as error:
            raise DataDirError(
                f"cannot create {real}: {error.strerror}. Fix: choose a GPUCLOUD_DATA_DIR "
                "this user can create"
            ) from None
        real, problems = _check(path)  # someone may have made one of them first
    if problems:
        raise DataDirError(problems[0])
    tightened = []
    for target, private in ((real, 0o700), *((real / name, 0o600) for name in PRIVATE_FILES)):
        if target.exists() and (mode := stat.S_IMODE(os.lstat(target).st_mode)) & _OTHERS_ANY:
            os.chmod(target, private)
            tightened.append(f"{target} {mode:04o} -> {private:04o}")
    return tightened


def _check(path: Path) -> tuple[Path, list[str]]:
    """Where `path` really is, and its problems."""
    me = os.geteuid()
    visited: dict[Path, os.stat_result] = {Path("/"): os.lstat("/")}
    try:
        real = _walk(Path("/"), path.expanduser().absolute().parts[1:], visited, 0)
    except DataDirError as error:
        return path, [str(error)]
    problems = [
        problem
        for node, info in visited.items()
        if node != real and (problem := _on_the_way(node, info, me)) is not None
    ]
    if real in visited:
        problems += _own(real, visited[real], me)
    return real, problems


def _walk(current: Path, parts: Sequence[str], visited: dict[Path, os.stat_result], links: int) -> Path:
    """Follow `parts` from the real directory `current` as the kernel does, recording the lstat of each
    existing path passed (directories and symbolic links); where they lead (a missing tail as written)."""
    for index, part in enumerate(parts):
        if part == "..":
            current = current.parent
            continue
        step = current / part
        try:
            info = os.lstat(step)
        except (FileNotFoundError, NotADirectoryError):
            return Path(os.path.normpath(step.joinpath(*parts[index + 1:])))
        except OSError as error:
            raise DataDirError(f"cannot inspect {step}: {error.strerror}. Fix: choose a GPUCLOUD_DATA_DIR "
                               "this user can reach") from None
        visited[step] = info
        current = step
        if stat.S_ISLNK(info.st_mode):
            if links >= _MAX_LINKS:
                raise DataDirError(f"{step}: too many levels of symbolic links. Fix: choose a "
                                   "GPUCLOUD_DATA_DIR without a link loop")
            target = Path(os.readlink(step))
            if target.is_absolute():
                current = _walk(Path("/"), target.parts[1:], visited, links + 1)
            else:
                current = _walk(step.parent, target.parts, visited, links + 1)
    return current


def _on_the_way(node: Path, info: os.stat_result, me: int) -> str | None:
    """The problem of a directory or symbolic link on the way to the data dir, or None."""
    if info.st_uid not in (0, me):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a directory"
        return (f"{node}, {kind} on the way to it, is {_describe(info)}, neither root nor "
                f"{_owner(me)} who runs the backend: its owner can swap the data dir for their own. "
                f"Fix: choose a GPUCLOUD_DATA_DIR outside {node}")
    if stat.S_ISLNK(info.st_mode) or not info.st_mode & _OTHERS_WRITE:
        return None
    if info.st_uid == 0 and info.st_mode & stat.S_ISVTX:
        return None  # like /tmp: others cannot rename or remove our entry
    return (f"{node}, a directory on the way to it, is {_describe(info)}: group or others can "
            f"write to it and swap the data dir for their own. Fix: chmod go-w {node}, or choose a "
            f"GPUCLOUD_DATA_DIR outside {node}")


def _own(real: Path, info: os.stat_result, me: int) -> list[str]:
    """The problems of the data dir itself and of its database files and key."""
    name = _owner(me, named_only=True)
    if not stat.S_ISDIR(info.st_mode):
        return [f"{real} is not a directory ({_describe(info)}). Fix: choose a "
                "GPUCLOUD_DATA_DIR that is one"]
    if info.st_uid != me:
        return [f"{real} is {_describe(info)}, not by {_owner(me)} who runs the backend: "
                "its owner can read or replace the database and keys. Fix: choose another "
                f"GPUCLOUD_DATA_DIR, or, if {real} and everything in it are yours: "
                f"chown -R {name}: {real} && chmod 0700 {real}"]
    if info.st_mode & _OTHERS_WRITE:
        return [f"{real} is {_describe(info)}: group or others can replace the database "
                f"and keys in it. Fix: check its contents, then chmod 0700 {real}"]
    problems = []
    for file in (real / file_name for file_name in PRIVATE_FILES):
        try:
            found = os.lstat(file)
        except OSError:  # missing (or the directory unreadable: SQLite will say so)
            continue
        if not stat.S_ISREG(found.st_mode) or found.st_uid != me or found.st_mode & _OTHERS_WRITE:
            problems.append(
                f"{file} is {_describe(found)}, but must be a regular file of {_owner(me)} that nobody "
                "else can write: someone else may have planted or changed it. Fix: check it, then "
                f"chown {name}: {file} && chmod 0600 {file} (or remove it)")
    return problems


def _describe(info: os.stat_result) -> str:
    return f"owned by {_owner(info.st_uid)} with mode {stat.S_IMODE(info.st_mode):04o}"


def _owner(uid: int, *, named_only: bool = False) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid) if named_only else f"uid {uid}"
    return name if named_only else f"uid {uid} ({name})"
