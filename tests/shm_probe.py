"""What a test sees of /dev/shm for itself, independent of gnnbook's own clean-up code."""
import os
from pathlib import Path


def shm_mapped_by(pids: list[int]) -> set[str]:
    """/dev/shm entries these processes map, matched by inode (a semaphore is
    mapped under glibc's temporary name, then renamed to ``sem.mp-*``)."""
    inodes = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
            inodes |= {int(line.split()[4]) for line in maps if " /dev/shm/" in line}
        except OSError:
            pass
    return {e.name for e in os.scandir("/dev/shm") if e.inode() in inodes} if inodes else set()
