"""The base: processes, their watchdog, measurement and the environment (no book section:
what every chapter's real processes and measured claims stand on).

- ``procs``: supervised process groups (deadline, fail fast, nothing left behind); ``reaper``, their
  watchdog that outlives a killed launcher; ``private_net``: a job's private loopback (a user +
  network namespace that no other user of the host can reach);
- ``launch`` / ``worker``: a function run in N real ranks joined by torch.distributed (gloo); ``pool``: ranks
  started once and given one job after another; ``records``:
  the dataclasses a rank may return (an allow-list: results cross processes without unpickling a class);
- ``memory``: peak memory of a block of code; ``budget``: a hard memory limit for a group of processes
  (a memory cgroup) and its measured peak; ``wire``: bytes measured on this process's TCP sockets;
  ``cpu_share``: the cores other processes held while a block ran;
- ``seeding``: one seed for everything, DGL's sampler on one thread; ``errors``: ``UserError``;
  ``env``: the installed versions against the course's pins.
"""

__all__ = ["budget", "cpu_share", "env", "errors", "launch", "memory", "pool", "private_net", "procs", "reaper",
           "records", "seeding", "wire", "worker"]
