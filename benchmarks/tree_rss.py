"""Run a command and measure what ``/usr/bin/time -v`` does not: the peak of the *summed*
resident memory of its whole process tree (an audit's Python process plus the servers it
starts run at the same time; ``time -v`` reports the largest single process only), with the
load average and the other busy processes of the machine while it ran::

    .venv/bin/python benchmarks/tree_rss.py --log out.txt -- python scripts/audit_llama_server.py ...

Every ``--every`` seconds it sums ``VmRSS`` over the command and its descendants
(``/proc``, Linux only); every 60 s it notes the load average and the processes outside the
tree using more than 20% of a core. The command's exit status is returned.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psutil

GIB = 2**30


def summed_rss(root: psutil.Process) -> tuple[int, list[psutil.Process]]:
    """The summed resident bytes of ``root`` and its descendants, and those processes (none
    once ``root`` has gone); a process that ends meanwhile counts as nothing."""
    try:
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, []
    rss = 0
    for p in tree:
        try:
            rss += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return rss, tree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command")
    log = args.log.open("a", encoding="utf-8")

    def note(line: str) -> None:
        log.write(line + "\n")
        log.flush()

    note(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC: {' '.join(cmd)}")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    root = psutil.Process(proc.pid)
    peak, peak_at, last_census = 0, 0.0, -60.0
    loads: list[float] = []
    while proc.poll() is None:
        rss, tree = summed_rss(root)
        if not tree:
            break
        if rss > peak:
            peak, peak_at = rss, time.perf_counter() - t0
        now = time.perf_counter() - t0
        if now - last_census >= 60:
            last_census = now
            load = psutil.getloadavg()
            loads.append(load[0])
            mine = {p.pid for p in tree}
            busy = []
            for p in psutil.process_iter(["pid", "cpu_percent", "cmdline", "nice"]):
                if p.info["pid"] in mine or p.info["pid"] == psutil.Process().pid:
                    continue
                cpu = p.info["cpu_percent"] or 0.0  # since the previous census
                if cpu > 20:
                    what = " ".join(p.info["cmdline"] or [])[:120]
                    busy.append(f"{cpu:.0f}% nice {p.info['nice']} {what}")
            note(
                f"t={now:7.0f} s  load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  tree RSS "
                f"{rss / GIB:.2f} GiB ({len(tree)} processes)  others: {'; '.join(busy) or '-'}"
            )
        time.sleep(args.every)
    rc = proc.wait()
    wall = time.perf_counter() - t0
    note(
        f"# exit {rc}; wall {wall:.0f} s; peak summed tree RSS {peak / GIB:.2f} GiB "
        f"({peak / 1e9:.2f} GB) at t={peak_at:.0f} s; load average (1 min) over the run: "
        + (f"{min(loads):.2f}-{max(loads):.2f}, mean {sum(loads) / len(loads):.2f}" if loads
           else "-")
    )  # fmt: skip
    log.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
