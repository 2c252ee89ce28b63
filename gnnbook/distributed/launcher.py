"""Start DGL graph servers and trainer processes for a partition config, and
run any DistDGL training script under them.

Book: 8.3.3 and 8.3.4 launching servers and trainers.

Used in: no notebook directly.

Every process gets the environment DGL's own launcher (``tools/launch.py``)
gives it, so an unmodified DistDGL script works: servers run the script with
``DGL_ROLE=server``, ``DGL_SERVER_ID``, ``DGL_NUM_SERVER``, ``DGL_NUM_CLIENT``,
``DGL_IP_CONFIG``, ``DGL_CONF_PATH``, ``DGL_GRAPH_FORMAT`` (and
``dgl.distributed.initialize`` never returns in them); trainers run it with
``DGL_DIST_MODE=distributed``, ``DGL_ROLE=client``, ``DGL_NUM_SAMPLER``,
``DGL_GROUP_ID`` plus the variables ``torch.distributed.run`` would set
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``).  We start each trainer ourselves instead
of through ``torch.distributed.run`` so that one supervisor
(:class:`gnnbook.base.procs.ProcessGroup`) sees every process by name.

Three ways to place machine m (partition m):

- ``local``: every machine on this host, the adaptation of
  :mod:`gnnbook.distributed.emulation` (no root), all of the job's processes in
  one private user + network namespace where the kernel allows it
  (:mod:`gnnbook.base.private_net`: no other user can connect to the job), else
  on the host's loopback with a warning; nothing listening beyond loopback: servers on 127.0.0.1 with ports chosen free,
  the rendezvous store in its own process (:mod:`gnnbook.distributed.store`) on 127.0.0.1, gloo on the loopback
  interface; a port taken by the time it is bound makes
  :func:`run_with_fresh_ports` start the job again with fresh ports;
- ``netns``: every machine a network + mount namespace of this host with its
  own IP (root; :mod:`gnnbook.distributed.netns`), stock DGL;
- ``cluster``: a host file in DGL's ip_config format (``IP [PORT]`` per line),
  every process started with ``ssh`` on its host; the working directory and
  Python path must be the same on every host, as with DGL's launcher.

Fail fast: the first process that exits non-zero or dies stops the job (all
processes are killed), a server that exits while trainers still run stops it
after 10 s, a trainer that exits 0 while its peers still run stops it after
30 s, a global deadline stops a hang (after a stack dump of every process into
its log), and the job's shared-memory segments are removed.  If the
launching process itself is killed, :mod:`gnnbook.base.reaper` does the same.
:class:`JobFailed` names the process and shows its log; the logs are kept.

Example:
    >>> plan = plan_job("cora.json", ["python", "train.py"], num_parts=2, num_trainers=1)  # doctest: +SKIP
    >>> print(render(plan))                                                             # doctest: +SKIP
"""
from __future__ import annotations

import errno
import ipaddress
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..base import private_net, reaper
from ..base.budget import BudgetReport, MemoryBudget, parse_bytes
from ..base.private_net import PrivateNetwork
from ..base.procs import ProcessFailed, ProcessGroup
from . import emulation

if TYPE_CHECKING:
    from .partition_files import OpenedPartition

MODES = ("local", "netns", "cluster")
DGL_SERVER_PORT = 30050  # the first graph server's port where a host file names none (DGL's launch.py default)
# Keep-alives: a lost link fails the ssh session (and the job) within a minute.
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "StrictHostKeyChecking=accept-new",
       "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]


class LaunchError(ValueError):
    """The job cannot be started as asked; the message says why and what to do."""


class JobFailed(ProcessFailed):
    """A process of the job failed, or the deadline passed; the job was stopped."""


@dataclass
class Machine:
    machine_id: int
    ip: str  # servers listen here
    port: int  # first server port; server s uses port + s
    # How to run a command there: [] (this host), ssh, or nsenter into namespaces.
    prefix: list[str] = field(default_factory=list)
    remote: bool = False  # env must travel inside the command (ssh)
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class ProcSpec:
    name: str  # server-m0-s0, trainer-m1-r0
    machine: int
    role: str  # "server", "trainer" or "store" (the rendezvous store of a local job)
    argv: list[str]  # what runs on the machine (before the ssh / nsenter prefix)
    env: dict[str, str]  # the job's variables (added to the inherited environment)
    full_argv: list[str]  # what this host starts


@dataclass
class JobPlan:
    mode: str
    part_config: Path
    workdir: Path
    job_tag: str
    machines: list[Machine]
    ip_config: Path
    processes: list[ProcSpec]
    # local mode: every process in one private user + network namespace (see gnnbook.base.private_net)
    private_network: bool = False
    exposure: str | None = None  # local mode on the shared loopback: why (printed as a warning at start)


def port_is_free(ip: str, port: int) -> bool:
    """Whether a server could listen on ``ip:port`` now (SO_REUSEADDR, as servers use).

    ``ip`` is the address the server binds: an IPv4 or IPv6 address, or ``""`` /
    ``"::"`` for every interface (as ``TCPStore`` listens); for ``"::"`` a
    dual-stack socket, so a listener on either family makes the port taken."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:  # no IPv6 on this host: the IPv4 wildcard is what a server would get
        return family == socket.AF_INET6 and port_is_free("", port)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        try:
            sock.bind((ip, port))
            sock.listen(1)  # a bound socket without listen() could share a port a listener holds
            return True
        except OSError:
            return False


def ephemeral_ports() -> range:
    """The kernel's range for outgoing connections' local ports (Linux: /proc; else IANA's)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(49152, 65536)


def _port_window(count: int) -> tuple[int, int]:
    """Where to draw server ports: 20000-32000 unless the ephemeral range overlaps it,
    then the widest gap beside the ephemeral range."""
    ephemeral = ephemeral_ports()
    gaps = [(lo, hi) for lo, hi in ((10000, ephemeral.start), (ephemeral.stop, 65536)) if hi - lo > count + 100]
    if not gaps:
        return 20000, 32000
    low, high = max(gaps, key=lambda gap: gap[1] - gap[0])
    return (20000, 32000) if low <= 20000 and high >= 32000 else (low, high)


def free_port_block(count: int, ip: str = "127.0.0.1", avoid: set[int] = frozenset(), tries: int = 200) -> int:
    """A first port p with p..p+count-1 free on ``ip`` (the address the server binds),
    outside the kernel's ephemeral range, so that a client's outgoing connection
    cannot take it before the server starts."""
    low, high = _port_window(count)
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(tries):
        base = rng.randrange(low, high - count)
        ports = range(base, base + count)
        if not avoid.intersection(ports) and all(port_is_free(ip, p) for p in ports):
            return base
    raise LaunchError(f"found no {count} free consecutive ports on {ip}; close other jobs and retry")


def loopback_interface() -> str:
    """The name of the interface that holds 127.0.0.1 (``lo`` on Linux), for GLOO_SOCKET_IFNAME."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return name
    return "lo"


def is_local_address(ip: str) -> bool:
    """Whether ``ip`` is an address of this host (a socket can be bound to it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, 0))
            return True
        except OSError:
            return False


def parse_ipv4(text: str) -> str:
    """``text`` if it is an IPv4 address in canonical dotted-quad form (``10.0.0.7``),
    else ValueError: ``127.1``, ``0x7f.0.0.1`` or ``010.0.0.1`` mean other
    addresses to different tools (inet_aton reads them as shorthand or octal)."""
    address = ipaddress.IPv4Address(text)  # rejects short forms, hex, leading zeros
    if str(address) != text:
        raise ValueError(f"{text!r} is not in canonical form ({address})")
    if address.is_unspecified or address.is_multicast or address == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError(f"{text} is not the address of one machine")
    return text


def read_host_file(path: str | Path) -> list[tuple[str, int | None]]:
    """``IP [PORT]`` per line (DGL's ip_config format); blank lines and ``#`` comments skipped.
    The IP must be a canonical IPv4 address (``10.0.0.7``, not ``10.7`` or ``010.0.0.7``)."""
    path = Path(path)
    if not path.is_file():
        raise LaunchError(f"host file {path} does not exist; write one line 'IP [PORT]' per machine")
    hosts = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            parse_ipv4(words[0])
        except ValueError as err:
            raise LaunchError(f"{path}:{number}: {words[0]!r} is not a canonical IPv4 address ({err}); "
                              "write all four decimal parts without leading zeros, e.g. 10.0.0.7") from None
        port_text = words[1] if len(words) > 1 else None
        if len(words) > 2 or (port_text is not None and not (port_text.isascii() and port_text.isdigit()
                                                             and 0 < int(port_text) < 65536)):
            raise LaunchError(f"{path}:{number}: expected 'IPv4-ADDRESS [PORT]' (PORT 1..65535), got {line.strip()!r}")
        hosts.append((words[0], int(port_text) if port_text else None))
    if not hosts:
        raise LaunchError(f"host file {path} lists no hosts")
    return hosts


PLACEHOLDER = re.compile(r"\{(ip_config|part_config|graph_name|num_parts|num_trainers|num_servers|num_samplers|"
                         r"workdir)\}")


def fill_placeholders(command: list[str], values: dict[str, str]) -> list[str]:
    """``command`` with ``{ip_config}``, ``{part_config}``... replaced by ``values``
    (other braces are left alone).  :func:`plan_job` fills them word by word,
    before any word is quoted for a shell, so a value can never close a quote.

    Example:
        >>> fill_placeholders(["python3", "train.py", "--ip_config", "{ip_config}", "{x}"], {"ip_config": "/j/ip.txt"})
        ['python3', 'train.py', '--ip_config', '/j/ip.txt', '{x}']
    """
    return [PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), word) for word in command]


def _env_words(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in env.items()]


def plan_job(part_config: str | Path | OpenedPartition, command: list[str], num_trainers: int = 1, num_servers: int = 1,
             num_samplers: int = 0, mode: str = "local", hosts: list[tuple[str, int | None]] | None = None,
             workdir: str | Path | None = None, master_port: int | None = None, base_port: int | None = None,
             omp_threads: int = 1, netns_machines: list[Machine] | None = None,
             private_network: bool | None = None) -> JobPlan:
    """Everything the job will run, where, with which variables; nothing starts.
    The number of machines is the number of partitions in ``part_config``; the
    placeholders of :func:`fill_placeholders` in ``command`` become this job's values.
    An opened partition (:func:`~gnnbook.distributed.partition_files.open_partition`) is
    not read again.

    A local job runs in a private user + network namespace
    (:mod:`gnnbook.base.private_net`) where the kernel allows one
    (``private_network=None``); ``True`` requires it, ``False`` uses the host's
    loopback (then other users of the host can reach the job's ports).

    More than 8 parameters: one per option of the launch command line (python -m gnnbook launch), which passes
    them through unchanged.
    """
    from .partition_files import open_partition  # torch: only when a job is planned
    if mode not in MODES:
        raise LaunchError(f"unknown mode '{mode}'; use one of {', '.join(MODES)}")
    for label, value, low in (("trainers", num_trainers, 1), ("servers", num_servers, 1),
                              ("samplers", num_samplers, 0)):
        if not isinstance(value, int) or value < low:
            raise LaunchError(f"the number of {label} per machine must be an integer >= {low}, got {value!r}")
    if not command:
        raise LaunchError("no training command given")
    partition = open_partition(part_config, node_data=False)
    part_config = partition.config_path.resolve()
    num_parts = partition.num_parts
    job_tag = emulation.new_job_tag()
    exposure = None
    if mode != "local" or private_network is False:
        private_network = False
    else:
        reason = private_net.unavailable_reason()
        if reason is not None and private_network:
            raise LaunchError(f"a private network namespace was asked for, but {reason}")
        private_network, exposure = reason is None, reason

    if mode == "local":
        emulation.remove_stale_segments()  # left by a supervisor that was killed
        machines, used = [], set()
        for m in range(num_parts):
            if base_port is not None:
                port = base_port + m * num_servers
                for p in range(port, port + num_servers):
                    if not port_is_free("127.0.0.1", p):
                        raise LaunchError(f"port {p} on 127.0.0.1 (server of machine {m}) is already taken; "
                                          "choose another base port or leave it out to pick free ports")
            else:
                port = free_port_block(num_servers, avoid=used)
            used.update(range(port, port + num_servers))
            machines.append(Machine(m, "127.0.0.1", port, extra_env=emulation.emulation_env(job_tag, m)))
        if master_port is not None and (master_port in used or not port_is_free("127.0.0.1", master_port)):
            raise LaunchError(f"port {master_port} on 127.0.0.1 (the torch.distributed store, MASTER_PORT) is "
                              "already taken; choose another master port or leave it out to pick a free one")
        master_port = master_port or free_port_block(1, avoid=used)
    elif mode == "netns":
        if not netns_machines or len(netns_machines) < num_parts:
            raise LaunchError(f"netns mode needs {num_parts} namespaces (one per partition); "
                              "see gnnbook.distributed.netns")
        machines = netns_machines[:num_parts]
        master_port = master_port or 29500
    else:
        if not hosts:
            raise LaunchError("cluster mode needs a host file (--hosts FILE, one 'IP [PORT]' line per machine)")
        if len(hosts) != num_parts:
            raise LaunchError(f"the host file lists {len(hosts)} hosts but {part_config.name} has {num_parts} "
                              "partitions; DGL needs one machine per partition")
        machines, seen = [], {}
        ips = [ip for ip, _ in hosts]
        for m, (ip, port) in enumerate(hosts):
            port = port or DGL_SERVER_PORT
            if (ip, port) in seen:
                raise LaunchError(f"the host file lists {ip} port {port} for machines {seen[ip, port]} "
                                  f"and {m}; give each machine its own address or port")
            seen[ip, port] = m
            # Each process is told its machine id: DGL would take the first line naming a local
            # address, so two machines on one host would both be machine 0.  Where a host holds
            # several machines the adaptation must be active (as in local mode), else it stops.
            # The job's segments carry the prefix so that clean-up can find them.
            # And the job's marker (as local processes have it), by which clean-up finds them there.
            site = {emulation.MACHINE_ENV: str(m), emulation.PREFIX_ENV: f"{job_tag}m{m}_",
                    "PYTHONPATH": str(emulation.SITE_DIR), **reaper.marker_env(job_tag)}
            if ips.count(ip) > 1:
                site[emulation.REQUIRED_ENV] = "required"
            machines.append(Machine(m, ip, port, SSH + ["-tt", ip], remote=True, extra_env=site))
        master_port = master_port or 29500
        _check_ports_of_this_host(machines, num_servers, master_port)

    workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gnnbook-dist-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ip_config = workdir / "ip_config.txt"
    ip_config.write_text("".join(f"{m.ip} {m.port}\n" for m in machines))
    command = fill_placeholders(command, dict(
        ip_config=str(ip_config), part_config=str(part_config), graph_name=partition.graph_name,
        num_parts=str(num_parts), num_trainers=str(num_trainers), num_servers=str(num_servers),
        num_samplers=str(num_samplers), workdir=str(workdir)))
    num_clients = num_trainers * (1 + num_samplers) * len(machines)
    common = {
        "DGL_NUM_SAMPLER": str(num_samplers), "DGL_NUM_CLIENT": str(num_clients), "DGL_CONF_PATH": str(part_config),
        "DGL_IP_CONFIG": str(ip_config), "DGL_NUM_SERVER": str(num_servers), "DGL_GRAPH_FORMAT": "csc",
        "OMP_NUM_THREADS": str(omp_threads), "DGLBACKEND": "pytorch",
    }
    trainer_env = {"MASTER_ADDR": machines[0].ip, "MASTER_PORT": str(master_port)}
    cwd = os.getcwd()
    processes = []
    world = num_trainers * len(machines)
    if mode == "local":
        # Nothing listens beyond loopback: gloo's device on the loopback interface
        # (else it takes the address the host name resolves to), and the
        # rendezvous store in its own process on 127.0.0.1 (else rank 0 hosts one
        # on every interface); each rank connects to it as torchrun's workers do.
        common["GLOO_SOCKET_IFNAME"] = loopback_interface()
        trainer_env.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
        servers = ",".join(str(m.port + s) for m in machines for s in range(num_servers))
        store_argv = [sys.executable, "-m", "gnnbook.distributed.store", "--servers", servers, "--host",
                      machines[0].ip, "--port", str(master_port), "--world-size", str(world)]
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(dict.fromkeys([package_root,
                                              *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]))
        processes.append(_proc("store", machines[0], "store", store_argv, {"PYTHONPATH": path}, cwd))
    for machine in machines:
        for s in range(num_servers):
            env = {**common, "DGL_ROLE": "server", "DGL_SERVER_ID": str(machine.machine_id * num_servers + s),
                   **machine.extra_env}
            processes.append(_proc(f"server-m{machine.machine_id}-s{s}", machine, "server", command, env, cwd))
    for machine in machines:
        for r in range(num_trainers):
            env = {**common, "DGL_DIST_MODE": "distributed", "DGL_ROLE": "client", "DGL_GROUP_ID": "0",
                   **trainer_env, "RANK": str(machine.machine_id * num_trainers + r), "WORLD_SIZE": str(world),
                   "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(num_trainers),
                   "GROUP_RANK": str(machine.machine_id), **machine.extra_env}
            processes.append(_proc(f"trainer-m{machine.machine_id}-r{r}", machine, "trainer", command, env, cwd))
    return JobPlan(mode, part_config, workdir, job_tag, machines, ip_config, processes, private_network, exposure)


def _check_ports_of_this_host(machines: list[Machine], num_servers: int, master_port: int) -> None:
    """For the machines of a host file that are this host: their server ports on
    the machine's address, and (machine 0) MASTER_PORT on every interface,
    where rank 0's TCPStore listens."""
    for machine in machines:
        if not is_local_address(machine.ip):
            continue
        for port in range(machine.port, machine.port + num_servers):
            if not port_is_free(machine.ip, port):
                raise LaunchError(f"port {port} on {machine.ip} (server of machine {machine.machine_id}, this host) "
                                  "is already taken; give another port in the host file")
        if machine.machine_id == 0 and not port_is_free("::", master_port):
            raise LaunchError(f"port {master_port} (MASTER_PORT, rank 0's torch.distributed store on every "
                              f"interface of {machine.ip}, this host) is already taken; choose another master port")


def _proc(name: str, machine: Machine, role: str, command: list[str], env: dict[str, str], cwd: str) -> ProcSpec:
    if machine.remote:
        inner = f"cd {shlex.quote(cwd)} && exec env {shlex.join(_env_words(env) + list(command))}"
        full = machine.prefix + [inner]
    else:
        full = machine.prefix + list(command)
    return ProcSpec(name, machine.machine_id, role, list(command), env, full)


def render(plan: JobPlan) -> str:
    """The dry run: every process, where it runs, its variables and command."""
    lines = [f"# mode {plan.mode}: {len(plan.machines)} machines, job {plan.job_tag}, ip_config {plan.ip_config}:"]
    lines += [f"#   {m.ip} {m.port}" for m in plan.machines]
    if plan.private_network:
        lines.append("# every process runs in one private user + network namespace (nsenter --target HOLDER "
                     "--user --net --preserve-credentials -- COMMAND), unreachable from outside")
    elif plan.exposure:
        lines.append(f"# on the host's shared loopback: {plan.exposure}")
    for p in plan.processes:
        where = plan.machines[p.machine].ip
        if plan.machines[p.machine].remote:
            lines.append(f"# {p.name} on {where}\n{shlex.join(p.full_argv)}")
        else:
            lines.append(f"# {p.name} on {where}\n{shlex.join(['env'] + _env_words(p.env) + p.full_argv)}")
    return "\n".join(lines)


class Job:
    """A running job: :meth:`start`, then :meth:`wait` (or use it as a context
    manager, which always stops everything and removes shared memory).  A
    start that fails half-way (a process that cannot start, a Ctrl-C) stops
    what was started.  With ``machine_memory`` (bytes or ``"2GiB"``) each
    machine's servers and trainers, and all they start, share one
    :class:`~gnnbook.base.budget.MemoryBudget`; a machine over it fails the job
    with its name, budget and peak, and :attr:`reports` holds every machine's peak."""

    def __init__(self, plan: JobPlan, deadline_s: float = 600.0, server_exit_grace_s: float = 10.0,
                 peer_exit_grace_s: float = 30.0, machine_memory: int | str | None = None):
        if machine_memory is not None and plan.mode == "cluster":
            raise LaunchError("a machine memory budget applies to the emulated machines of one host; on a cluster "
                              "each machine has its own memory: leave out --machine-memory with --hosts")
        self.plan = plan
        self.group = ProcessGroup(deadline_s, log_dir=plan.workdir / "logs", grace_s=10.0,
                                  on_cleanup=self.cleanup, background_exit_grace_s=server_exit_grace_s,
                                  peer_exit_grace_s=peer_exit_grace_s, tag=plan.job_tag)
        self.machine_memory = None if machine_memory is None else parse_bytes(machine_memory)
        self.budgets: list[MemoryBudget] = []
        self.reports: list[BudgetReport] = []  # each machine's budget and peak, once the job has ended
        self.removed_segments: list[str] = []
        self.started = False
        self.failed = False  # JobFailed was raised: keep the logs
        self.network: PrivateNetwork | None = None  # the job's private loopback (local mode, where available)

    def start(self) -> "Job":
        if self.started:
            return self
        self.started = True
        try:
            if plan_made_workdir(self.plan):
                self.group.remove_on_death(self.plan.workdir)
            if self.plan.mode == "cluster":  # a killed launcher still cleans every host's /dev/shm
                for m in self.plan.machines:
                    self.group.undo_on_death(self.remote_cleanup(m))
            prefix: list[str] = []
            if self.plan.private_network:
                self.group.arm()  # the watchdog first: it kills the holder (marked as the job's) with the job
                self.network = PrivateNetwork(env=reaper.marker_env(self.group.tag)).start()
                prefix = self.network.prefix()
            elif self.plan.exposure:
                print(private_net.exposure_warning(self.plan.exposure), file=sys.stderr, flush=True)
            if self.machine_memory is not None:
                for m in self.plan.machines:
                    self.budgets.append(MemoryBudget(f"machine {m.machine_id}", self.machine_memory))
                    if self.budgets[-1].path is not None:  # a killed launcher leaves no cgroup behind
                        self.group.undo_on_death(["rmdir", str(self.budgets[-1].path)])
            for p in self.plan.processes:  # servers first: they are listed first
                budget = self.budgets[p.machine] if self.budgets and p.role != "store" else None
                if prefix:  # nsenter would start and then fail: a missing program fails here, as without it
                    _check_program(p.full_argv[0], {**os.environ, **p.env})
                self.group.start(p.name, prefix + p.full_argv,
                                 env=None if self.plan.machines[p.machine].remote else p.env,
                                 background=p.role != "trainer", budget=budget)
        except BaseException:
            self.close()
            raise
        return self

    def pid(self, name: str) -> int:
        return next(m.popen.pid for m in self.group.members if m.name == name)

    def log(self, name: str) -> str:
        return self.group.log(name)

    def _over_budget(self) -> str:
        """Read every machine's peak (while its cgroup exists); the machines over budget, described."""
        self.reports = [b.report() for b in self.budgets]
        return "; ".join(r.message() for r in self.reports if r.exceeded)

    def wait(self) -> dict[str, int]:
        try:
            codes = self.group.wait()
        except ProcessFailed as err:
            self.failed = True
            self.group.kill()
            self.cleanup()
            over, reason = self._over_budget(), str(err).split(chr(10))[0]
            reason = f"{over}: {reason}" if over else reason  # the machine over budget first: it is the cause
            raise JobFailed(err.name, err.returncode, err.log_tail,
                            f"{reason} (all logs: {self.group.log_dir})") from None
        over = self._over_budget()
        if over:  # measured, not enforced (no cgroup here): the job ran but did not fit
            self.failed = True
            first = self.plan.processes[-1]
            raise JobFailed(first.name, 0, "", f"{over} (all logs: {self.group.log_dir})")
        return codes

    def remote_cleanup(self, machine: Machine) -> list[str]:
        """The ssh command that, on a cluster machine, kills what is left of the job there (every
        process whose environment carries the job's marker) and removes the job's segments."""
        return SSH + [machine.ip, remote_cleanup_script(self.plan.job_tag)]

    def cleanup(self) -> None:
        """Remove the job's shared-memory segments (over ssh on a cluster)."""
        if self.plan.mode == "cluster":
            for m in self.plan.machines:
                try:
                    subprocess.run(self.remote_cleanup(m), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20, check=False)
                except subprocess.TimeoutExpired:  # an unreachable host: its segments go with its reboot
                    print(f"gnnbook: could not reach {m.ip} within 20 s to remove the job's /dev/shm segments "
                          f"(*{self.plan.job_tag}*)", file=sys.stderr)
        elif self.plan.mode == "local":
            self.removed_segments += emulation.remove_segments(self.plan.job_tag)
        self.removed_segments += self.group.removed_segments

    def _close_budgets(self) -> None:
        for budget in self.budgets:
            try:
                budget.close()
            except OSError as err:  # a process the kernel has not yet reaped still holds it
                print(f"gnnbook: could not remove the cgroup of {budget.name} ({budget.path}): {err}", file=sys.stderr)

    def _close_network(self) -> None:
        if self.network is not None:
            self.network.close()
            self.network = None

    def close(self) -> None:
        """Stop every process, remove shared memory, cgroups and the private network, disarm the watchdog."""
        try:
            self.group.__exit__(None, None, None)
        finally:
            self._close_budgets()
            self._close_network()

    def __enter__(self) -> "Job":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.group.__exit__(*exc)
        finally:
            self._close_budgets()
            self._close_network()


def remote_cleanup_script(job_tag: str) -> str:
    """The shell command of :meth:`Job.remote_cleanup` (``job_tag`` is a plain name: no quoting needed).

    Example:
        >>> remote_cleanup_script("gnnbook1x0abcde").endswith("rm -f /dev/shm/*gnnbook1x0abcde*")
        True
    """
    if not re.fullmatch(r"[A-Za-z0-9_]+", job_tag):
        raise ValueError(f"job tag {job_tag!r} is not a plain name")
    marker = next(iter(reaper.marker_env(job_tag)))
    return (f"for p in /proc/[0-9]*; do grep -qsz '^{marker}=1$' $p/environ && kill -9 ${{p#/proc/}}; done; "
            f"rm -f /dev/shm/*{job_tag}*")


def _check_program(program: str, env: dict[str, str]) -> None:
    """Raise FileNotFoundError, as starting it would, if ``program`` cannot be found or run."""
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory (or not executable): {program!r}", program)


def plan_made_workdir(plan: JobPlan) -> bool:
    """Whether the plan's folder is the temporary one :func:`plan_job` made."""
    return (plan.workdir.resolve().parent == Path(tempfile.gettempdir()).resolve()
            and plan.workdir.name.startswith("gnnbook-dist-"))


PORT_RETRIES = 3  # fresh-port restarts of a local job whose server or store found its port taken
# DGL's server: "Cannot bind to 127.0.0.1:31952"; our store: see store.PORT_TAKEN_MESSAGE.
_PORT_CLASH = re.compile(r"Cannot bind to \S*?:(\d+)|gnnbook store: port (\d+) on \S+ is already taken")


def port_clash(err: ProcessFailed) -> int | None:
    """The port that the failed process could not listen on because it was taken, or None."""
    match = _PORT_CLASH.search(err.log_tail)
    return int(match.group(1) or match.group(2)) if match else None


def run_with_fresh_ports(new_job: Callable[[], Job], retries: int = PORT_RETRIES) -> dict[str, int]:
    """Run the started job that ``new_job()`` returns; when a local job fails
    because a server or the store found its port taken (by something that took
    it after planning), plan and start a fresh job, up to ``retries`` times."""
    for attempt in range(retries + 1):
        with new_job() as job:
            try:
                return job.wait()
            except JobFailed as err:
                port = port_clash(err)
                if port is None or job.plan.mode != "local":
                    raise
                if attempt == retries:
                    raise JobFailed(err.name, err.returncode, err.log_tail,
                                    f"port {port} was taken when '{err.name}' tried to listen on it, and so were "
                                    f"the fresh ports of {retries} more starts; find what holds these ports "
                                    f"(ss -ltnp) and stop it (all logs: {job.group.log_dir})") from None
                print(f"gnnbook: port {port} was taken when '{err.name}' started; starting the job again with "
                      f"fresh ports ({attempt + 1}/{retries})", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def run_job(plan: JobPlan, deadline_s: float = 600.0) -> dict[str, int]:
    """Start the plan's processes, wait for them, stop everything on the first
    failure (:class:`JobFailed`), and clean up in every case."""
    with Job(plan, deadline_s) as job:
        return job.wait()
