#!/usr/bin/env python3
"""How late this CPU wakes up: sleep 0.5 ms over and over for SECONDS, print the lateness.

Usage: wakeup_latency.py [SECONDS]   (run it pinned to the proxy's CPU)

Prints one line: `p50=… p99=… p99.9=… max=…` in milliseconds. On a shared virtual
machine an idle vCPU is sometimes not run again for milliseconds; those stalls hit every
proxy alike and set a floor under the tail latency of the fixed-rate scenario, so
bench/run.sh records them next to its results.
"""

import sys
import time


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    late = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.monotonic()
        time.sleep(0.0005)
        late.append(time.monotonic() - t - 0.0005)
    late.sort()
    n = len(late)
    pct = lambda q: late[min(n - 1, int(n * q))] * 1000  # noqa: E731
    print("p50=%.2fms p99=%.2fms p99.9=%.2fms max=%.2fms" % (pct(0.5), pct(0.99), pct(0.999), late[-1] * 1000))


if __name__ == "__main__":
    main()
