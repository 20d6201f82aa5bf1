#!/usr/bin/env python3
"""Runs `logdex demo` and checks what it printed: every shipped record
indexed, each app's records counted back, the four example queries answered,
at least one alert from the generated burst received, the metrics summary,
exit 0, and the work directory left as asked.

usage: demo_check.py PATH/TO/logdex
"""
import re
import subprocess
import sys
import tempfile

logdex = sys.argv[1]
with tempfile.TemporaryDirectory() as work:
    p = subprocess.run([logdex, "demo", "--dir", work], capture_output=True, text=True, timeout=300)
    out = p.stdout
    print(out)
    print(p.stderr, file=sys.stderr)
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    check(p.returncode == 0, f"exit code {p.returncode}")
    m = re.search(r"(\d+) of (\d+) records indexed", out)
    check(m and m.group(1) == m.group(2) and int(m.group(2)) == 11000, "all 11000 records indexed")
    for app, n in [("hdfs", 2000), ("openstack", 2000), ("apache", 2000), ("android", 2000), ("checkout", 3000)]:
        check(re.search(rf"^\s+{app}\s+{n}$", out, re.M), f"{app}: {n} records counted back")
    check(out.count("$ logdex query") == 4, "four example queries")
    check(len(re.findall(r"^\s+\d{4}-\d\d-\d\dT\S+\s+(ERROR|FATAL)\s+apache\s+web-1", out, re.M)) == 4,
          "the apache ERROR query shows 4 records")
    check(re.search(r"FATAL\s+checkout\s+web-\d\s+order store unreachable", out), "the tag query finds the FATAL line")
    check(re.search(r"^\s+- \[(ERROR|FATAL)\] checkout/web-\d", out, re.M), "an alert from the burst reached the webhook")
    check(re.search(r"logdex_indexer_records_total\s+11000", out), "metrics summary")
    check("try next" in out, "next commands")
    if failures:
        print("demo_check: FAILED: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)
    print("demo_check: ok")
