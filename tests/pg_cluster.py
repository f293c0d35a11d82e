"""A throwaway PostgreSQL cluster for the tests, the benchmarks and CI.

``initdb`` into a fresh temporary directory (as the unprivileged ``postgres`` OS user when run as
root: initdb refuses root), a server listening only on a Unix socket inside that directory, and a
watchdog process that stops the server and removes the directory when the process that started
it goes away, whatever the reason (normal exit, exception, SIGKILL). ``stop()`` does the same at
once.

As a script (what ``.ci/run`` uses)::

    eval "$(python tests/pg_cluster.py start)"     # exports CAUSALMEM_TEST_PG_DSN, CAUSALMEM_TEST_PG_DIR
                                                   # (start --durable: fsync on, for benchmarks)
    python tests/pg_cluster.py stop "$CAUSALMEM_TEST_PG_DIR"

The server binaries are looked up on ``PATH``, then in ``/usr/lib/postgresql/<version>/bin``
(Debian's ``postgresql`` package); ``CAUSALMEM_PG_BIN`` overrides.
"""
from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

__all__ = ["Cluster", "find_bin", "start", "stop"]


def find_bin() -> str | None:
    """Directory holding initdb/pg_ctl/postgres, or None."""
    env = os.environ.get("CAUSALMEM_PG_BIN")
    if env and os.path.exists(os.path.join(env, "initdb")):
        return env
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(found)
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    return os.path.dirname(cands[-1]) if cands else None


@dataclass
class Cluster:
    dir: str
    dsn: str  #: DSN of the ``postgres`` maintenance database
    bin: str
    watchdog: subprocess.Popen | None = None

    def dsn_for(self, dbname: str) -> str:
        return self.dsn.replace("/postgres?", f"/{dbname}?", 1)

    def stop(self) -> None:
        stop(self.dir, self.bin)
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.terminate()
            try:
                self.watchdog.wait(5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self.watchdog.kill()


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def start(*, durable: bool = False, watch_pid: int | None = None) -> Cluster:
    """Create and start a cluster; ``durable=False`` turns fsync off (tests: the cluster is thrown
    away anyway). The watchdog stops it when ``watch_pid`` (default: this process) is gone."""
    bindir = find_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries not found (install Debian's 'postgresql' package "
                           "or set CAUSALMEM_PG_BIN)")
    root = tempfile.mkdtemp(prefix="causalmem-pg-")
    os.chmod(root, 0o755)
    data, sock = os.path.join(root, "data"), os.path.join(root, "sock")
    os.mkdir(sock)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(sock, "postgres", "postgres")
    try:
        subprocess.run(_as_owner([os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
                                  "-E", "UTF8", "--locale=C", "--no-sync"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root)
        opts = {
            "listen_addresses": "''", "unix_socket_directories": f"'{sock}'", "max_connections": "300",
            "shared_buffers": "256MB", "synchronous_commit": "off", "fsync": "on" if durable else "off",
            "full_page_writes": "on" if durable else "off", "max_wal_size": "2GB", "log_min_messages": "fatal",
            "logging_collector": "off",
        }
        with open(os.path.join(data, "postgresql.conf"), "a") as fh:
            fh.write("\n" + "".join(f"{k} = {v}\n" for k, v in opts.items()))
        subprocess.run(_as_owner([os.path.join(bindir, "pg_ctl"), "-D", data, "-l", os.path.join(root, "log"),
                                  "-w", "-t", "60", "start"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root)
    except subprocess.CalledProcessError as exc:
        log = ""
        try:
            with open(os.path.join(root, "log")) as fh:
                log = fh.read()[-2000:]
        except OSError:
            pass
        stop(root, bindir)
        raise RuntimeError(f"could not start PostgreSQL: {exc} {exc.stderr!r} {log}") from exc
    dsn = f"postgresql://postgres@/postgres?host={sock}"
    cluster = Cluster(root, dsn, bindir)
    pid = os.getpid() if watch_pid is None else watch_pid
    script = (f"while kill -0 {pid} 2>/dev/null; do sleep 1; done; "
              f"{shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))} stop {shlex.quote(root)}")
    cluster.watchdog = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
    return cluster


def stop(root: str, bindir: str | None = None) -> None:
    """Stop the server of the cluster in ``root`` (if running) and delete the directory."""
    data = os.path.join(root, "data")
    bindir = bindir or find_bin()
    if bindir and os.path.exists(os.path.join(data, "postmaster.pid")):
        subprocess.run(_as_owner([os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
        for _ in range(50):
            if not os.path.exists(os.path.join(data, "postmaster.pid")):
                break
            time.sleep(0.1)
    shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "start":
        # the cluster outlives this script: the watchdog follows the calling shell instead;
        # ``start --durable``: fsync on (the benchmarks' setting)
        c = start(durable="--durable" in argv[1:], watch_pid=os.getppid())
        print(f"export CAUSALMEM_TEST_PG_DSN={shlex.quote(c.dsn)} CAUSALMEM_TEST_PG_DIR={shlex.quote(c.dir)}")
        return 0
    if argv == ["check"]:  # exit status: are the server binaries here?
        return 0 if find_bin() else 1
    if len(argv) == 2 and argv[0] == "stop":
        stop(argv[1])
        return 0
    print("usage: pg_cluster.py start [--durable] | stop DIR | check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
