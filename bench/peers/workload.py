"""The peer benchmark's workload: seeded JSON lines built from the Loghub samples.

One JSON object per line, keys in this order:
  {"time": <ms since the epoch>, "app": ..., "host": ..., "severity": ..., "message": ...}
`time` is an integer (ms) because ClickHouse 18.16 has no sub-second DateTime type
(DateTime64 came in 20.1); logdex, VictoriaLogs and ClickHouse all read it as is.

Messages are the `Content` column of tests/data/loghub/*_structured.csv (Loghub,
https://github.com/logpai/loghub; see tests/data/loghub/LICENSE and CITATION), prefixed
with the line's component. Each digit run is redrawn with probability 1/2 (same length),
so a 2,000-line sample replayed 200 times is not 200 identical copies for the compressors.
Severities are drawn independently of the message: INFO 88 %, WARN 8 %, DEBUG 3 %, ERROR 1 %.
Times are spread evenly over [start, end) with jitter, in file order (a replay is sorted).
Needle tokens are appended as a last word to lines at fixed fractions of the file.

The generator also counts, for every benchmark query, the lines that match (the ground
truth the systems' answers are compared with), so nothing depends on one system being right.
"""

import csv
import json
import os
import random
import re

APPS = {  # app name -> Loghub sample
    "hdfs": "HDFS",
    "spark": "Spark",
    "openstack": "OpenStack",
    "apache": "Apache",
    "android": "Android",
    "linux": "Linux",
    "openssh": "OpenSSH",
}
HOSTS = [f"node-{i:02d}" for i in range(1, 13)]
HOSTS_PER_APP = 6
SEVERITIES = [("INFO", 0.88), ("WARN", 0.08), ("DEBUG", 0.03), ("ERROR", 0.01)]

NEEDLE = "zqxneedle7k3"      # a word no sample contains
NEEDLE_APP = "hdfs"
NEEDLE_IN_APP = 5           # lines of NEEDLE_APP that get the needle
NEEDLE_ELSEWHERE = 3        # lines of other apps that get it
QUERY_APP = "hdfs"
QUERY_HOST = "node-07"
COMMON_WORD = "Received"    # in 4 of the 7 samples, ~5 % of the lines, never inside a longer word
REGEX = "Invalid user [a-z]+ from [0-9.]+"  # RE2 and Python agree on it; no backslashes (SQL, LogsQL quoting)
PAGE = 100                  # "first page": the newest 100 matching lines
HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS


def load_samples(data_dir):
    out = {}
    for app, stem in APPS.items():
        path = os.path.join(data_dir, f"{stem}_2k.log_structured.csv")
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            rows = list(csv.DictReader(f))
        msgs = []
        for r in rows:
            comp = (r.get("Component") or "").strip()
            content = r["Content"].strip()
            msgs.append(f"{comp}: {content}" if comp else content)
        out[app] = msgs
    return out


def queries(end_ms):
    """The benchmark queries, shared by every system. Times are [from, to) in ms."""
    day = (end_ms - DAY_MS, end_ms)
    hour = (end_ms - HOUR_MS, end_ms)
    q = [
        ("app_1h_page", "first page, one app, last hour", dict(app=QUERY_APP, range=hour, page=True)),
        ("app_24h_page", "first page, one app, 24 h", dict(app=QUERY_APP, range=day, page=True)),
        ("host_24h_page", "first page, host only, 24 h", dict(host=QUERY_HOST, range=day, page=True)),
        ("error_24h_count", "severity ERROR, 24 h, count", dict(severity="ERROR", range=day, page=False)),
        ("error_24h_page", "severity ERROR, 24 h, first page", dict(severity="ERROR", range=day, page=True)),
        ("needle_app_24h", "needle token, one app, 24 h", dict(app=NEEDLE_APP, word=NEEDLE, range=day, page=True)),
        ("needle_all_24h", "needle token, all apps, 24 h", dict(word=NEEDLE, range=day, page=True)),
        ("word_24h_page", f"common word '{COMMON_WORD}', 24 h, first page", dict(word=COMMON_WORD, range=day, page=True)),
        ("regex_24h_page", f"regex /{REGEX}/, 24 h, first page", dict(regex=REGEX, range=day, page=True)),
    ]
    return [dict(id=i, title=t, **spec) for i, t, spec in q]


def matches(spec, ts, app, host, sev, msg, regex):
    lo, hi = spec["range"]
    if not (lo <= ts < hi):
        return False
    if "app" in spec and app != spec["app"]:
        return False
    if "host" in spec and host != spec["host"]:
        return False
    if "severity" in spec and sev != spec["severity"]:
        return False
    if "word" in spec and spec["word"] not in msg:
        return False
    if "regex" in spec and not regex.search(msg):
        return False
    return True


def generate(out_path, lines, seed, end_ms, data_dir):
    """Writes `lines` JSON lines to out_path; returns the manifest (queries with their counts)."""
    rng = random.Random(seed)
    samples = load_samples(data_dir)
    app_names = list(APPS)
    app_hosts = {a: sorted(rng.sample(HOSTS, HOSTS_PER_APP)) for a in app_names}
    if QUERY_HOST not in app_hosts[QUERY_APP]:
        app_hosts[QUERY_APP][0] = QUERY_HOST
    sev_names = [s for s, _ in SEVERITIES]
    sev_weights = [w for _, w in SEVERITIES]
    start_ms = end_ms - DAY_MS
    step = DAY_MS / lines
    digits = re.compile(r"[0-9]+")
    regex = re.compile(REGEX)
    qs = queries(end_ms)
    counts = {q["id"]: 0 for q in qs}
    pages = {q["id"]: [] for q in qs if q["page"]}  # newest PAGE (ts, message), kept as a sliding window
    word_substr_only = 0

    # Needles: fixed fractions of the file; a planted line keeps its app only if it fits.
    needle_in_app = {int(lines * f) for f in (0.11, 0.33, 0.55, 0.77, 0.985)}
    needle_elsewhere = {int(lines * f) for f in (0.2, 0.6, 0.97)}
    planted = {"in_app": 0, "elsewhere": 0, "positions": []}

    def redraw(m):
        s = m.group(0)
        if rng.random() < 0.5:
            return s
        return "".join(rng.choice("0123456789") for _ in s)

    dumps = json.JSONEncoder(ensure_ascii=False).encode
    with open(out_path, "w", encoding="utf-8") as out:
        for i in range(lines):
            ts = start_ms + int((i + rng.random() * 0.999) * step)
            if i in needle_in_app:
                app = NEEDLE_APP
            elif i in needle_elsewhere:
                app = rng.choice([a for a in app_names if a != NEEDLE_APP])
            else:
                app = rng.choice(app_names)
            host = rng.choice(app_hosts[app])
            sev = rng.choices(sev_names, sev_weights)[0]
            msg = digits.sub(redraw, rng.choice(samples[app]))
            if i in needle_in_app or i in needle_elsewhere:
                msg = f"{msg} {NEEDLE}"
                planted["in_app" if app == NEEDLE_APP else "elsewhere"] += 1
                planted["positions"].append({"line": i + 1, "app": app, "host": host, "time": ts})
            out.write('{"time":%d,"app":"%s","host":"%s","severity":"%s","message":%s}\n'
                      % (ts, app, host, sev, dumps(msg)))
            if COMMON_WORD in msg and not re.search(r"\b%s\b" % COMMON_WORD, msg):
                word_substr_only += 1
            for q in qs:
                if matches(q, ts, app, host, sev, msg, regex):
                    counts[q["id"]] += 1
                    if q["page"]:
                        p = pages[q["id"]]
                        p.append((ts, msg))
                        if len(p) > PAGE:
                            del p[0]
    for q in qs:
        q["expected_count"] = counts[q["id"]]
        if q["page"]:
            q["expected_page"] = sorted(pages[q["id"]], reverse=True)
    return {
        "lines": lines,
        "seed": seed,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "apps": app_hosts,
        "needle": NEEDLE,
        "needles_planted": planted,
        "common_word": COMMON_WORD,
        "common_word_substring_only_lines": word_substr_only,
        "regex": REGEX,
        "page": PAGE,
        "queries": qs,
    }



class Realtime:
    """The second workload: `streams` quiet streams, each sending one line per wall-clock second.

    Stream i is app APPS[i % 7] on host rt-<i>. Lines are stamped in simulated time that runs
    `time_scale` times faster than the wall clock and ends at the run's planned end, so that a
    short run covers hours (a merged chunk may span 3 h) while the arrival pattern stays one line
    per stream per second; no line is stamped ahead of the wall clock. batch(s) is the lines of
    wall second s, as bytes; the generator counts every query's matches as the replay's does.
    """

    def __init__(self, streams, seconds, time_scale, seed, data_dir, start_wall_ms):
        self.rng = random.Random(seed)
        self.samples = load_samples(data_dir)
        apps = list(APPS)
        self.streams = [(apps[i % len(apps)], f"rt-{i:04d}") for i in range(streams)]
        self.seconds, self.scale = seconds, time_scale
        self.end_ms = start_wall_ms + seconds * 1000
        self.start_ms = self.end_ms - seconds * time_scale * 1000
        self.lines = 0
        self.raw_bytes = 0
        self.sev_names = [s for s, _ in SEVERITIES]
        self.sev_weights = [w for _, w in SEVERITIES]
        self.digits = re.compile(r"[0-9]+")
        self.regex = re.compile(REGEX)
        # Needles: three (second, stream) places, fixed fractions of the run.
        self.needles = {(int(seconds * f), int(streams * g) % streams) for f, g in ((0.1, 0.3), (0.5, 0.6), (0.9, 0.1))}
        rng = (self.start_ms - 60_000, self.end_ms + 60_000)
        self.host = self.streams[7 % streams][1]
        qs = [
            ("rt_app_page", f"first page, one app ({QUERY_APP}), whole run", dict(app=QUERY_APP, range=rng, page=True)),
            ("rt_host_page", f"first page, one host ({self.host}), whole run", dict(host=self.host, range=rng, page=True)),
            ("rt_error_count", "severity ERROR, whole run, count", dict(severity="ERROR", range=rng, page=False)),
            ("rt_needle_all", "needle token, all apps, whole run", dict(word=NEEDLE, range=rng, page=True)),
        ]
        self.queries = [dict(id=i, title=t, **spec) for i, t, spec in qs]
        self.counts = {q["id"]: 0 for q in self.queries}
        self.pages = {q["id"]: [] for q in self.queries if q["page"]}
        self.dumps = json.JSONEncoder(ensure_ascii=False).encode

    def _redraw(self, m):
        s = m.group(0)
        if self.rng.random() < 0.5:
            return s
        return "".join(self.rng.choice("0123456789") for _ in s)

    def batch(self, second):
        base = self.end_ms - (self.seconds - second) * self.scale * 1000
        span = max(1, (self.scale - 1) * 1000)
        out = []
        for i, (app, host) in enumerate(self.streams):
            ts = base + (i * 7919) % span  # each stream at its own place (7919 is prime: distinct for i < span)
            sev = self.rng.choices(self.sev_names, self.sev_weights)[0]
            msg = self.digits.sub(self._redraw, self.rng.choice(self.samples[app]))
            if (second, i) in self.needles:
                msg = f"{msg} {NEEDLE}"
            out.append('{"time":%d,"app":"%s","host":"%s","severity":"%s","message":%s}\n'
                       % (ts, app, host, sev, self.dumps(msg)))
            for q in self.queries:
                if matches(q, ts, app, host, sev, msg, self.regex):
                    self.counts[q["id"]] += 1
                    if q["page"]:
                        p = self.pages[q["id"]]
                        p.append((ts, msg))
                        if len(p) > 4 * PAGE:
                            p.sort(reverse=True)
                            del p[PAGE:]
        data = "".join(out).encode()
        self.lines += len(out)
        self.raw_bytes += len(data)
        return data

    def manifest(self):
        for q in self.queries:
            q["expected_count"] = self.counts[q["id"]]
            if q["page"]:
                q["expected_page"] = sorted(self.pages[q["id"]], reverse=True)[:PAGE]
        return dict(lines=self.lines, queries=self.queries)

if __name__ == "__main__":
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lines", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--end-ms", type=int, default=int(time.time() // 60 * 60 * 1000))
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "loghub"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    m = generate(a.out, a.lines, a.seed, a.end_ms, a.data)
    for q in m["queries"]:
        q.pop("expected_page", None)
    print(json.dumps(m, indent=1))
