#!/usr/bin/env python3
"""Runs a command and writes its peak resident set (KiB, the kernel's ru_maxrss for that child,
what GNU time's %M reports) and how it ended to a file, killing it if its resident set grows
past --cap-mib or it runs past --timeout; a benchmark sweep uses it so that a point that would
take the machine's memory (PyTorch at a large batch and input) ends as "over-cap" instead of
waking the OOM killer. The resident set is polled every 20 ms, so a process can pass the cap
by what it touches in that time before it is killed.

usage: peak_rss.py --out FILE [--cap-mib N] [--timeout SEC] -- COMMAND [ARG...]

FILE gets one line "PEAK_KIB STATUS", STATUS one of ok, over-cap, timeout, exit-N, signal-N.
The exit status is the command's (128 + N for a signal). The command's stdout and stderr are
its own.
"""
import argparse
import os
import signal
import sys
import time


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cap-mib", type=int, default=0, help="0: no cap")
    ap.add_argument("--timeout", type=float, default=0, help="seconds, 0: none")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command")
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            print(f"peak_rss.py: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
            os._exit(127)
    start, killed = time.monotonic(), None
    cap_kib = a.cap_mib * 1024
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if killed is None:
            if cap_kib and rss_kib(pid) > cap_kib:
                killed = "over-cap"
            elif a.timeout and time.monotonic() - start > a.timeout:
                killed = "timeout"
            if killed:
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    if killed:
        how, rc = killed, 128 + signal.SIGKILL
    elif os.WIFSIGNALED(status):
        how, rc = f"signal-{os.WTERMSIG(status)}", 128 + os.WTERMSIG(status)
    else:
        rc = os.WEXITSTATUS(status)
        how = "ok" if rc == 0 else f"exit-{rc}"
    with open(a.out, "w") as f:
        f.write(f"{usage.ru_maxrss} {how}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
