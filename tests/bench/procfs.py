"""What the benchmarks read of a process in /proc (Linux): sizes in KiB."""


def status_kib(pid, field):
    """A size from /proc/PID/status (VmRSS, VmHWM, RssAnon, ...); None if gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def pss_kib(pid):
    """Proportional set size: shared pages split among their users; 0 if gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
