#!/usr/bin/env python3
"""The peer benchmark's driver (bench/peers/run.sh calls it; see bench/README.md, "Peers").

Runs logdex, VictoriaLogs and ClickHouse one after the other on the same generated JSON-lines
file (workload.py) and the same queries, and prints one JSON object (stdout, first) and a
markdown table (stdout, after it). Every server it starts runs in its own process group under
a scratch directory and is stopped (SIGTERM, then SIGKILL) on every way out.

Figures per system:
  ingest: wall time from the first byte sent until every line is queryable; CPU = the server
    process's utime+stime (/proc/PID/stat, all threads) over that span plus the client's
    (logdex ship, or curl posting the file in chunks: wait4 rusage), per 10^6 lines, and
    lines per CPU-second ("lines/s per core");
  settle: what was waited for, its CPU, then bytes on disk per raw byte;
  queries: latency of `runs` warm runs after one untimed warm-up run (p50, p95), from this
    process over HTTP on loopback; the count each system answers and whether the first page
    equals the generator's.
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import workload

CLK_TCK = os.sysconf("SC_CLK_TCK")
PROCS = []  # every server started: stopped by cleanup()


def log(*a):
    print("peers:", *a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def proc_cpu(pid):
    """utime + stime of a live process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for n in files:
            try:
                total += os.lstat(os.path.join(root, n)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def dir_apparent_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for n in files:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except FileNotFoundError:
                pass
    return total


def dir_files(path):
    return sum(len(f) for _, _, f in os.walk(path))


class Server:
    def __init__(self, name, cmd, logpath, env=None):
        self.name = name
        self.log = open(logpath, "wb")
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True, env=env)
        PROCS.append(self)

    def cpu(self):
        return proc_cpu(self.p.pid)

    def check(self):
        """Raises, with the end of its log, if the server has exited."""
        if self.p.poll() is not None:
            self.log.flush()
            with open(self.log.name, "rb") as f:
                tail = f.read()[-1500:].decode(errors="replace")
            raise RuntimeError(f"{self.name} exited with {self.p.returncode}: {tail}")

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=30):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name}: no exit {timeout} s after SIGTERM: SIGKILL")
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait()
        self.log.close()
        if self in PROCS:
            PROCS.remove(self)


def cleanup():
    for s in list(PROCS):
        s.stop(timeout=10)


def run_client(cmd, **kw):
    """Runs a client to completion; returns (returncode, stdout, stderr). Its CPU: ChildCpu around the call."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, **kw)
    out, err = p.communicate()
    return p.returncode, out, err


class ChildCpu:
    """CPU of the children reaped inside a `with` block."""

    def __enter__(self):
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.t0 = r.ru_utime + r.ru_stime
        return self

    def __exit__(self, *exc):
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.seconds = r.ru_utime + r.ru_stime - self.t0
        return False


def http(url, data=None, timeout=120, headers=None):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        body = e.read()[:1000].decode(errors="replace").strip()
        raise RuntimeError(f"HTTP {e.code} from {url.split('?')[0]}: {body}") from None


def wait_until(what, pred, timeout, interval=0.2, server=None):
    deadline = time.monotonic() + timeout
    last_err = None
    while time.monotonic() < deadline:
        if server is not None:
            server.check()
        try:
            if pred():
                return True
        except Exception as e:  # noqa: BLE001 - a server not up yet answers with any error
            last_err = e
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}" + (f" (last error: {last_err})" if last_err else ""))


def wait_dir_stable(path, quiet_s=10, timeout=300):
    """Waits until a directory's size has not changed for quiet_s seconds."""
    last, since = -1, time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        b = dir_bytes(path)
        if b != last:
            last, since = b, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return b
        time.sleep(1)
    return last


def iso_ms(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


def page_key(rows):
    return sorted(((int(t), m) for t, m in rows), reverse=True)


# ---------------------------------------------------------------------------------------------
# Systems. Each: start(), ingest(path, chunks) -> dict, settle() -> dict, query(q) -> rows or
# None (unsupported), count(q) -> int or None, stop(). rows are [(ts_ms, message)].


class Logdex:
    name = "logdex"

    def __init__(self, binary, work, lines, partitions):
        self.bin, self.work, self.lines, self.partitions = binary, work, lines, partitions
        self.store = os.path.join(work, "store")
        self.notes = [
            f"serve --embedded-kafka (librdkafka's in-process mock cluster, {partitions} partitions: it keeps only "
            "~5 MiB per partition, more partitions keep a lagging consumer from losing data); RocksDB, "
            "store.durability async (default)",
            "ship --format json --stream-from-line (each line's app/host pick its stream)",
            "no full-text index (issue 17): needle/word queries are `contains` filters after decompression; "
            "queries without app/host/tag need scan=true (a main-table scan); no regex filter; no count: "
            "counted by following cursors at limit=10000",
        ]

    @staticmethod
    def env():
        # serve refuses LOGDEX_* variables it does not know (a typo must not disable auth); run.sh's
        # LOGDEX_BIN is one of them.
        return {k: v for k, v in os.environ.items() if k != "LOGDEX_BIN"}

    def start(self):
        self.port = free_port()
        self.boot = os.path.join(self.work, "bootstrap")
        self.srv = Server("logdex serve", [self.bin, "serve", "--embedded-kafka", "--embedded-partitions",
                                           str(self.partitions), "--bootstrap-file", self.boot, "--store-dir",
                                           self.store, "--http", f"127.0.0.1:{self.port}"],
                          os.path.join(self.work, "serve.log"), env=self.env())
        wait_until("logdex serve's bootstrap file", lambda: os.path.getsize(self.boot) > 0, 120, server=self.srv)
        self.url = f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        text = http(self.url + "/metrics").decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def ingest(self, path, chunks):
        brokers = open(self.boot).read().strip()
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        with ChildCpu() as cc:
            rc, out, err = run_client([self.bin, "ship", "--brokers", brokers, "--app", "bench", "--host", "bench",
                                       "--format", "json", "--stream-from-line", "--no-progress", "--state-dir",
                                       os.path.join(self.work, "ship-state"), path], env=self.env())
        if rc != 0:
            raise RuntimeError(f"logdex ship exited {rc}: {err.decode(errors='replace')[-2000:]}")
        ship_wall = time.monotonic() - t0
        wait_until(f"{self.lines} records indexed",
                   lambda: self.metric("logdex_indexer_records_total") >= self.lines, 1800, 0.5, server=self.srv)
        wall = time.monotonic() - t0
        server_cpu = self.srv.cpu() - cpu0
        lost = self.metric("logdex_consumer_lost_messages_total")
        indexed = self.metric("logdex_indexer_records_total")
        stored_chunks = self.metric("logdex_indexer_chunks_total")
        rows = self.metric("logdex_store_rows_written_total")
        per_table = {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^logdex_store_rows_written_total\{table="([^"]+)"\} (\S+)$', http(self.url + "/metrics").decode(), re.M)}
        return dict(stored_chunks=stored_chunks, stored_chunks_per_million_lines=stored_chunks / self.lines * 1e6,
                    store_rows_written=rows, store_rows_written_per_table=per_table, wall_s=wall, client_wall_s=ship_wall, server_cpu_s=server_cpu, client_cpu_s=cc.seconds,
                    client="logdex ship", indexed_records=indexed, kafka_lost_messages=lost,
                    ship_summary=err.decode(errors="replace").strip().splitlines()[-1:])

    def settle(self):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        b = wait_dir_stable(self.store, quiet_s=10)
        return dict(waited_for="the store directory unchanged for 10 s (logdex has no compaction or flush "
                               "command: RocksDB's own background flushes and compactions)",
                    settle_s=time.monotonic() - t0, settle_cpu_s=self.srv.cpu() - cpu0,
                    disk_bytes=b, apparent_bytes=dir_apparent_bytes(self.store), files=dir_files(self.store))

    def after_stop(self):
        return dict(disk_bytes_after_clean_shutdown=dir_bytes(self.store),
                    apparent_bytes_after_clean_shutdown=dir_apparent_bytes(self.store),
                    files_after_clean_shutdown=dir_files(self.store))

    def _params(self, q, limit):
        p = [("from", str(q["range"][0])), ("to", str(q["range"][1])), ("limit", str(limit))]
        if "app" in q:
            p.append(("app", q["app"]))
        if "host" in q:
            p.append(("host", q["host"]))
        if "severity" in q:
            p.append(("severity", q["severity"]))
        if "word" in q:
            p.append(("contains", q["word"]))
        if "app" not in q and "host" not in q:
            p.append(("scan", "true"))
        return p

    def supports(self, q):
        return "regex" not in q

    def unsupported_reason(self, q):
        return "no regex filter in /api/v1/query"

    def _get(self, params):
        return json.loads(http(self.url + "/api/v1/query?" + urllib.parse.urlencode(params), timeout=300))

    def query(self, q):
        if not q["page"]:
            return self.count(q)
        a = self._get(self._params(q, workload.PAGE))
        return [(r["ts"], r["message"]) for r in a["records"]], a.get("stats", {}).get("plan")

    def count(self, q, max_pages=200):
        params = self._params(q, 10000)
        n, cursor = 0, None
        for _ in range(max_pages):
            a = self._get(params + ([("cursor", cursor)] if cursor else []))
            n += len(a["records"])
            cursor = a.get("next_cursor")
            if not cursor:
                return n
        raise RuntimeError(f"more than {max_pages} pages")

    def stop(self):
        self.srv.stop()


def post_chunks(url, chunks, headers):
    """POSTs each chunk file with curl, one after the other; returns the curls' CPU seconds."""
    with ChildCpu() as cc:
        for c in chunks:
            cmd = ["curl", "-sS", "--fail-with-body", "-X", "POST", "--data-binary", "@" + c, url]
            for h in headers:
                cmd += ["-H", h]
            rc, out, err = run_client(cmd)
            if rc != 0:
                raise RuntimeError(f"curl {url} exited {rc}: {(out + err).decode(errors='replace')[-2000:]}")
    return cc.seconds


class VictoriaLogs:
    name = "VictoriaLogs 1.52.1"

    def __init__(self, binary, work, lines):
        self.bin, self.work, self.lines = binary, work, lines
        self.data = os.path.join(work, "data")
        self.notes = ["single node, default flags but -httpListenAddr and -storageDataPath (retention 7d default)",
                      "ingest: /insert/jsonline?_time_field=time&_msg_field=message&_stream_fields=app,host",
                      "queries: LogsQL; app/host as stream filters, needle/common word as word filters, "
                      "count with `| stats count()`"]

    def start(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.srv = Server("victoria-logs", [self.bin, f"-httpListenAddr=127.0.0.1:{self.port}",
                                            f"-storageDataPath={self.data}"], os.path.join(self.work, "server.log"))
        wait_until("VictoriaLogs /health", lambda: http(self.url + "/health") is not None, 60, server=self.srv)

    def _count_all(self):
        return self._logsql("* | stats count() n")[0]["n"]

    def ingest(self, path, chunks):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        client = post_chunks(self.url + "/insert/jsonline?_time_field=time&_msg_field=message&_stream_fields=app,host",
                             chunks, ["Content-Type: application/stream+json"])
        client_wall = time.monotonic() - t0
        http(self.url + "/internal/force_flush")
        wait_until(f"{self.lines} lines counted", lambda: int(self._count_all()) >= self.lines, 600, 0.5)
        return dict(wall_s=time.monotonic() - t0, client_wall_s=client_wall, server_cpu_s=self.srv.cpu() - cpu0,
                    client_cpu_s=client, client="curl, 16 MiB POSTs, one at a time",
                    indexed_records=int(self._count_all()))

    def settle(self):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        http(self.url + "/internal/force_flush")
        http(self.url + "/internal/force_merge")
        time.sleep(1)

        def merged():
            m = http(self.url + "/metrics").decode()
            v = re.search(r"^vl_active_force_merges (\S+)", m, re.M)
            return v is not None and float(v.group(1)) == 0

        wait_until("the forced merge", merged, 900, 1)
        b = wait_dir_stable(self.data, quiet_s=10)
        return dict(waited_for="/internal/force_flush, then /internal/force_merge until vl_active_force_merges = 0, "
                               "then the data directory unchanged for 10 s",
                    settle_s=time.monotonic() - t0, settle_cpu_s=self.srv.cpu() - cpu0, disk_bytes=b,
                    apparent_bytes=dir_apparent_bytes(self.data), files=dir_files(self.data))

    def _logsql(self, qs, limit=None):
        params = [("query", qs)]
        if limit:
            params.append(("limit", str(limit)))
        body = http(self.url + "/select/logsql/query", data=urllib.parse.urlencode(params).encode(), timeout=300)
        return [json.loads(l) for l in body.splitlines() if l.strip()]

    def _filter(self, q):
        lo, hi = q["range"]
        f = [f"_time:[{iso_ms(lo)}, {iso_ms(hi)})"]
        if "app" in q:
            f.append('{app="%s"}' % q["app"])
        if "host" in q:
            f.append('{host="%s"}' % q["host"])
        if "severity" in q:
            f.append('severity:="%s"' % q["severity"])
        if "word" in q:
            f.append('"%s"' % q["word"])
        if "regex" in q:
            f.append('~"%s"' % q["regex"])
        return " ".join(f)

    def supports(self, q):
        return True

    @staticmethod
    def _ts(t):
        # RFC 3339 with up to 9 fraction digits, UTC
        m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z$", t)
        import calendar
        sec = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
        frac = (m.group(2) or "0")[:3].ljust(3, "0")
        return sec * 1000 + int(frac)

    def query(self, q):
        if not q["page"]:
            return self.count(q)
        rows = self._logsql(self._filter(q), limit=workload.PAGE)
        return [(self._ts(r["_time"]), r["_msg"]) for r in rows], self._filter(q)

    def count(self, q):
        return int(self._logsql(self._filter(q) + " | stats count() n")[0]["n"])

    def stop(self):
        self.srv.stop()


class ClickHouse:
    name = "ClickHouse 18.16 (Debian 12; from 2018)"

    def __init__(self, work, lines):
        self.work, self.lines = work, lines
        self.notes = ["clickhouse-server 18.16.1 from Debian 12 (a 2018 release; current ClickHouse differs a lot)",
                      "MergeTree PARTITION BY day ORDER BY (app, host, time); time UInt64 ms (18.16 has no DateTime64); "
                      "String columns (LowCardinality is experimental there); default LZ4 compression",
                      "ingest: HTTP POST INSERT ... FORMAT JSONEachRow; queries: SQL over HTTP, needle/word as "
                      "position() > 0, regex as match()"]

    def start(self):
        self.port, tcp = free_port(), free_port()
        d = self.work
        for sub in ("data", "tmp"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        with open(os.path.join(d, "users.xml"), "w") as f:
            f.write("<yandex><profiles><default></default></profiles>"
                    "<users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks>"
                    "<profile>default</profile><quota>default</quota></default></users>"
                    "<quotas><default></default></quotas></yandex>\n")
        with open(os.path.join(d, "config.xml"), "w") as f:
            f.write(f"""<yandex>
  <logger><level>warning</level><log>{d}/clickhouse.log</log><errorlog>{d}/clickhouse.err.log</errorlog></logger>
  <http_port>{self.port}</http_port><tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path><tmp_path>{d}/tmp/</tmp_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>
</yandex>
""")
        self.url = f"http://127.0.0.1:{self.port}/"
        self.srv = Server("clickhouse-server", ["clickhouse-server", f"--config-file={d}/config.xml"],
                          os.path.join(d, "server.out"))
        wait_until("ClickHouse's HTTP port", lambda: http(self.url) == b"Ok.\n", 120, server=self.srv)
        self.sql("CREATE TABLE logs (time UInt64, app String, host String, severity String, message String) "
                 "ENGINE = MergeTree() PARTITION BY toDate(intDiv(time, 1000)) ORDER BY (app, host, time)")

    def sql(self, q, timeout=600):
        return http(self.url, data=q.encode(), timeout=timeout)

    def ingest(self, path, chunks):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        client = post_chunks(self.url + "?" + urllib.parse.urlencode({"query": "INSERT INTO logs FORMAT JSONEachRow"}),
                             chunks, [])
        n = int(self.sql("SELECT count() FROM logs"))
        return dict(wall_s=time.monotonic() - t0, client_wall_s=time.monotonic() - t0,
                    server_cpu_s=self.srv.cpu() - cpu0, client_cpu_s=client,
                    client="curl, 16 MiB POSTs, one at a time", indexed_records=n)

    def settle(self):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        parts = self.sql("SELECT DISTINCT partition_id FROM system.parts WHERE table = 'logs' AND active").decode().split()
        for p in parts:
            self.sql(f"OPTIMIZE TABLE logs PARTITION ID '{p}' FINAL", timeout=1800)
        active = int(self.sql("SELECT count() FROM system.parts WHERE table = 'logs' AND active"))
        try:
            b = int(self.sql("SELECT sum(bytes_on_disk) FROM system.parts WHERE table = 'logs' AND active"))
            col = "bytes_on_disk"
        except RuntimeError:
            b = int(self.sql("SELECT sum(bytes) FROM system.parts WHERE table = 'logs' AND active"))
            col = "bytes"
        return dict(waited_for=f"OPTIMIZE TABLE logs PARTITION ID p FINAL for each of its {len(parts)} partitions "
                               f"(synchronous); size = sum({col}) of the active parts in system.parts",
                    settle_s=time.monotonic() - t0, settle_cpu_s=self.srv.cpu() - cpu0, disk_bytes=b,
                    active_parts=active, data_dir_bytes_with_inactive_parts=dir_bytes(os.path.join(self.work, "data")))

    def _where(self, q):
        lo, hi = q["range"]
        w = [f"time >= {lo}", f"time < {hi}"]
        if "app" in q:
            w.append(f"app = '{q['app']}'")
        if "host" in q:
            w.append(f"host = '{q['host']}'")
        if "severity" in q:
            w.append(f"severity = '{q['severity']}'")
        if "word" in q:
            w.append(f"position(message, '{q['word']}') > 0")
        if "regex" in q:
            w.append(f"match(message, '{q['regex']}')")
        return " AND ".join(w)

    def supports(self, q):
        return True

    def query(self, q):
        if not q["page"]:
            return self.count(q)
        s = (f"SELECT time, message FROM logs WHERE {self._where(q)} ORDER BY time DESC LIMIT {workload.PAGE} "
             "FORMAT JSONEachRow")
        rows = [json.loads(l) for l in self.sql(s).splitlines() if l.strip()]
        return [(int(r["time"]), r["message"]) for r in rows], s

    def count(self, q):
        return int(self.sql(f"SELECT count() FROM logs WHERE {self._where(q)}"))

    def stop(self):
        self.srv.stop()


# ---------------------------------------------------------------------------------------------


def raw_limits(path, needle):
    out = {}
    t = []
    for _ in range(3):
        t0 = time.monotonic()
        r = subprocess.run(["grep", "-c", "-F", needle, path], stdout=subprocess.PIPE)
        t.append(time.monotonic() - t0)
    out["grep_c_needle"] = dict(matches=int(r.stdout), seconds_median_of_3=statistics.median(t),
                                note="grep -c -F over the raw file, page cache warm")
    data = open(path, "rb").read()
    out["raw_bytes"] = len(data)
    try:
        import snappy
        t0 = time.process_time()
        out["snappy"] = dict(bytes=len(snappy.compress(data)), cpu_s=time.process_time() - t0,
                             how="python-snappy snappy.compress (raw block format), whole file")
    except ImportError:
        out["snappy"] = dict(skipped="python3-snappy is not installed (scripts/install-deps.sh --peers)")
    try:
        import zstandard
        t0 = time.process_time()
        out["zstd"] = dict(bytes=len(zstandard.ZstdCompressor(level=3).compress(data)), cpu_s=time.process_time() - t0,
                           how="python zstandard, level 3 (zstd's default), one frame")
    except ImportError:
        if shutil.which("zstd"):
            t0 = time.monotonic()
            r = subprocess.run(["zstd", "-3", "-c", "-T1", path], stdout=subprocess.PIPE, check=True)
            out["zstd"] = dict(bytes=len(r.stdout), wall_s=time.monotonic() - t0, how="zstd CLI -3 -T1")
        else:
            out["zstd"] = dict(skipped="neither python zstandard nor the zstd CLI is installed")
    return out


def split_file(path, chunk_bytes, outdir):
    """Splits a JSON-lines file at line boundaries into files of about chunk_bytes."""
    chunks = []
    with open(path, "rb") as f:
        i = 0
        while True:
            buf = f.read(chunk_bytes)
            if not buf:
                break
            buf += f.readline()
            c = os.path.join(outdir, f"chunk{i:05d}.jsonl")
            with open(c, "wb") as o:
                o.write(buf)
            chunks.append(c)
            i += 1
    return chunks


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def bench_system(sysobj, path, chunks, manifest, runs, raw_bytes):
    r = dict(name=sysobj.name, notes=sysobj.notes)
    lines = manifest["lines"]
    sysobj.start()
    try:
        ing = sysobj.ingest(path, chunks)
        cpu = ing["server_cpu_s"] + ing["client_cpu_s"]
        ing["cpu_s"] = cpu
        ing["cpu_s_per_million_lines"] = cpu / lines * 1e6
        ing["lines_per_cpu_second"] = lines / cpu if cpu else None
        ing["lines_per_wall_second"] = lines / ing["wall_s"]
        r["ingest"] = ing
        log(f"{sysobj.name}: ingest {ing['wall_s']:.1f} s wall, {cpu:.1f} CPU-s")
        st = sysobj.settle()
        st["disk_bytes_per_raw_byte"] = st["disk_bytes"] / raw_bytes
        r["settle"] = st
        log(f"{sysobj.name}: settled, {st['disk_bytes']} bytes on disk")
        qres = {}
        for q in manifest["queries"]:
            entry = dict(title=q["title"], expected_count=q["expected_count"])
            if not sysobj.supports(q):
                entry["unsupported"] = sysobj.unsupported_reason(q)
                qres[q["id"]] = entry
                continue
            try:
                times = []
                res = None
                for i in range(runs + 1):  # run 0: untimed warm-up
                    t0 = time.monotonic()
                    res = sysobj.query(q)
                    dt = time.monotonic() - t0
                    if i > 0:
                        times.append(dt)
                entry["runs_ms"] = [round(t * 1000, 2) for t in times]
                entry["p50_ms"] = pct(times, 50) * 1000
                entry["p95_ms"] = pct(times, 95) * 1000
                if q["page"]:
                    rows, how = res
                    entry["how"] = how
                    entry["page_rows"] = len(rows)
                    entry["page_matches_expected"] = page_key(rows) == page_key(q["expected_page"])
                    entry["count"] = sysobj.count(q)
                else:
                    entry["count"] = res
                entry["count_matches_expected"] = entry["count"] == q["expected_count"]
            except Exception as e:  # noqa: BLE001 - reported, never hidden
                entry["error"] = f"{type(e).__name__}: {e}"
            qres[q["id"]] = entry
            log(f"{sysobj.name}: {q['id']}: " + json.dumps({k: v for k, v in entry.items() if k in (
                'p50_ms', 'count', 'count_matches_expected', 'page_matches_expected', 'error', 'unsupported')}))
        r["queries"] = qres
    finally:
        sysobj.stop()
    if hasattr(sysobj, "after_stop") and "settle" in r:
        r["settle"].update(sysobj.after_stop())
    return r


def fmt(v, nd=2):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v >= 100:
            return f"{v:,.0f}"
        return f"{v:.{nd}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(result):
    systems = result["systems"]
    names = [s["name"] if "name" in s else k for k, s in systems.items()]
    hdr = "| figure | " + " | ".join(names) + " | raw limit (same run) |"
    sep = "|" + " --- |" * (len(names) + 2)
    rows = [hdr, sep]
    raw = result["raw"]
    lines = result["workload"]["lines"]

    def cell(s, f):
        if "skipped" in s:
            return "skipped"
        if "error" in s and "ingest" not in s:
            return "failed"
        try:
            return f(s)
        except (KeyError, TypeError):
            return "-"

    def add(label, f, rawv=""):
        rows.append(f"| {label} | " + " | ".join(cell(s, f) for s in systems.values()) + f" | {rawv} |")

    add("ingest CPU-s per 10^6 lines (server + client)",
        lambda s: f"{fmt(s['ingest']['cpu_s_per_million_lines'])} ({fmt(s['ingest']['server_cpu_s'] / lines * 1e6)} + "
                  f"{fmt(s['ingest']['client_cpu_s'] / lines * 1e6)})")
    add("lines/s per core (lines per CPU-s)", lambda s: fmt(s["ingest"]["lines_per_cpu_second"]))
    add("ingest wall s (until all queryable)", lambda s: fmt(s["ingest"]["wall_s"]))
    add("settle: CPU-s", lambda s: fmt(s["settle"]["settle_cpu_s"]))
    zs = raw.get("zstd", {}).get("bytes")
    sn = raw.get("snappy", {}).get("bytes")
    rawtxt = ", ".join(x for x in [f"snappy {sn / raw['raw_bytes']:.3f}" if sn else "",
                                   f"zstd-3 {zs / raw['raw_bytes']:.3f}" if zs else ""] if x)
    add("bytes on disk per raw byte (settled)", lambda s: f"{s['settle']['disk_bytes_per_raw_byte']:.3f}", rawtxt)
    add("files / parts on disk", lambda s: fmt(s["settle"].get("files", s["settle"].get("active_parts"))))
    g = raw.get("grep_c_needle", {})
    for qid, q in result["queries"].items():
        rawv = f"grep -c {g['seconds_median_of_3'] * 1000:.0f} ms" if qid == "needle_all_24h" and g else ""

        def f(s, qid=qid):
            e = s["queries"][qid]
            if "unsupported" in e:
                return "unsupported"
            if "error" in e:
                return "error"
            flag = "" if e.get("count_matches_expected") and e.get("page_matches_expected", True) else " ≠"
            return f"{fmt(e['p50_ms'], 1)} / {fmt(e['p95_ms'], 1)}{flag}"

        add(f"{q['title']}: p50 / p95 ms (expected {q['expected_count']:,} lines)", f, rawv)
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--systems", default="logdex,victorialogs,clickhouse")
    ap.add_argument("--logdex-bin")
    ap.add_argument("--logdex-skip", default="", help="reason logdex cannot run")
    ap.add_argument("--victorialogs-bin")
    ap.add_argument("--victorialogs-skip", default="")
    ap.add_argument("--clickhouse-skip", default="")
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--dir", help="scratch directory (default: a new temporary one, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                                   "data", "loghub"))
    ap.add_argument("--json-out", help="also write the JSON object here")
    a = ap.parse_args()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (log(f"interrupted by signal {s}: stopping the servers, removing the "
                                             "scratch directory; no figures"), sys.exit(128 + s)))
    work = a.dir or tempfile.mkdtemp(prefix="logdex-peers-")
    os.makedirs(work, exist_ok=True)
    try:
        end_ms = int(time.time() // 60 * 60 * 1000)
        path = os.path.join(work, "workload.jsonl")
        log(f"generating {a.lines} lines (seed {a.seed}) into {path}")
        t0 = time.monotonic()
        manifest = workload.generate(path, a.lines, a.seed, end_ms, a.data)
        log(f"generated in {time.monotonic() - t0:.1f} s")
        chunkdir = os.path.join(work, "chunks")
        os.makedirs(chunkdir)
        chunks = split_file(path, 16 << 20, chunkdir)
        raw = raw_limits(path, manifest["needle"])
        result = dict(
            benchmark="logdex peers (issue 15), replay workload",
            started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            machine=dict(cores=os.cpu_count(), load_avg_at_start=os.getloadavg(), note="shared with other work: "
                         "figures are lower bounds"),
            workload=dict(lines=a.lines, seed=a.seed, raw_bytes=raw["raw_bytes"], start=iso_ms(manifest["start_ms"]),
                          end=iso_ms(manifest["end_ms"]), apps=manifest["apps"], needle=manifest["needle"],
                          needles_planted=manifest["needles_planted"], common_word=manifest["common_word"],
                          common_word_substring_only_lines=manifest["common_word_substring_only_lines"],
                          regex=manifest["regex"], page=manifest["page"],
                          not_run="workload 2 of issue 15 (real time: many low-rate streams) is not built yet"),
            query_runs=dict(warm_runs=a.runs, note="all runs warm (one untimed run first); no cold run: the page "
                            "cache is not dropped on a shared machine"),
            raw=raw,
            queries={q["id"]: dict(title=q["title"], expected_count=q["expected_count"]) for q in manifest["queries"]},
            systems={},
        )
        wanted = a.systems.split(",")
        for key in ("logdex", "victorialogs", "clickhouse"):
            if key not in wanted:
                result["systems"][key] = dict(name=key, skipped="not asked for (--systems)")
                continue
            skip = getattr(a, f"{key}_skip")
            if skip:
                result["systems"][key] = dict(name=key, skipped=skip)
                log(f"{key}: skipped: {skip}")
                continue
            sdir = os.path.join(work, key)
            os.makedirs(sdir)
            if key == "logdex":
                s = Logdex(a.logdex_bin, sdir, a.lines, a.partitions)
            elif key == "victorialogs":
                s = VictoriaLogs(a.victorialogs_bin, sdir, a.lines)
            else:
                s = ClickHouse(sdir, a.lines)
            try:
                result["systems"][key] = bench_system(s, path, chunks, manifest, a.runs, raw["raw_bytes"])
            except Exception as e:  # noqa: BLE001 - a system that fails is reported, and the others still run
                log(f"{key}: failed: {type(e).__name__}: {e}")
                result["systems"][key] = dict(name=s.name, error=f"{type(e).__name__}: {e}")
            cleanup()
        # Answers that differ between systems, whatever the generator says.
        diffs = {}
        for q in manifest["queries"]:
            got = {k: s["queries"][q["id"]].get("count") for k, s in result["systems"].items()
                   if "queries" in s and "count" in s["queries"][q["id"]]}
            if len(set(got.values()) | {q["expected_count"]}) > 1:
                diffs[q["id"]] = dict(expected=q["expected_count"], **got)
        result["count_disagreements"] = diffs
        result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(json.dumps(result, indent=1))
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(result, f, indent=1)
        print()
        print(table(result))
        print()
        print(f"{a.lines:,} lines ({raw['raw_bytes'] / 1e6:.0f} MB), {result['machine']['cores']} cores shared with "
              "other work; query times: warm, p50 / p95 of "
              f"{a.runs} runs; ≠ marks an answer that differs from the generator's (count or first page).")
        for k, s in result["systems"].items():
            if "skipped" in s:
                print(f"- {k}: skipped: {s['skipped']}")
            elif "error" in s:
                print(f"- {k}: failed: {s['error']}")
            else:
                for qid, e in s.get("queries", {}).items():
                    if "unsupported" in e:
                        print(f"- {s['name']}: {qid} unsupported: {e['unsupported']}")
                    elif "error" in e:
                        print(f"- {s['name']}: {qid} error: {e['error']}")
        for qid, d in diffs.items():
            print(f"- counts differ for {qid}: {d}")
        print(f"- {result['workload']['not_run']}")
    finally:
        cleanup()
        if not a.keep and not a.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
