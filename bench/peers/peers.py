#!/usr/bin/env python3
"""The peer benchmark's driver (bench/peers/run.sh calls it; see bench/README.md, "Peers").

Two workloads (workload.py), the same data and queries for every system: logdex (compaction
off, and compaction on with a 30 s settle; through a real Kafka broker, or serve's embedded mock cluster),
VictoriaLogs and ClickHouse. Prints one JSON object (stdout, first), then a markdown table per
workload. Every server it starts runs in its own process group under a scratch directory and is
stopped (SIGTERM, then SIGKILL) on every way out; `ship --follow` and the broker too (the broker
also dies with this process: KAFKA_ENGINE_OWNER_PID).

  replay: the systems one after the other on one JSON-lines file. Ingest: wall time from the
    first byte sent until every line is queryable; CPU = the server's utime+stime
    (/proc/PID/stat, all threads; logdex's broker included) over that span plus the client's
    (logdex ship, or curl posting the file in chunks: wait4 rusage), per 10^6 lines, and lines
    per CPU-second ("lines/s per core").
  real time: every system fed at once, a batch a second (see bench_realtime); CPU read for all
    at one moment once each has every line.
  settle: what was waited for, its CPU, then bytes on disk per raw byte.
  queries: `runs` warm runs after one untimed run (p50, p95), then `cold_runs` runs each after a
    server restart and a dropped page cache; from this process over HTTP on loopback; the count
    each system answers and whether the first page equals the generator's.
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
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import workload

CLK_TCK = os.sysconf("SC_CLK_TCK")
PROCS = []  # every server started: stopped by cleanup()
SHIPS = []  # `logdex ship --follow` processes: stopped by cleanup()
BROKERS = []  # real Kafka brokers started: stopped by cleanup()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def cleanup(brokers=False):
    for p in list(SHIPS):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        SHIPS.remove(p)
    for s in list(PROCS):
        s.stop(timeout=10)
    if brokers:
        for b in list(BROKERS):
            b.stop()


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


class KafkaBroker:
    """A real Apache Kafka broker (scripts/engines/kafka.sh: one KRaft node, jars from Maven, cached)."""

    def __init__(self, work):
        self.sh = os.path.join(ROOT, "scripts", "engines", "kafka.sh")
        self.dir = os.path.join(work, "kafka")
        self.version = None

    # kafka.sh's broker flags are a test node's (C1 JIT only, 512 MB heap); a benchmark runs it as
    # Kafka's own kafka-server-start.sh does (1 GB heap, G1, the full JIT).
    JVM_OPTS = "-Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35"

    def _run(self, *args, timeout=900):
        env = dict(os.environ, KAFKA_ENGINE_JVM_OPTS=self.JVM_OPTS, KAFKA_ENGINE_OWNER_PID=str(os.getpid()))
        r = subprocess.run([self.sh, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                           text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"kafka.sh {args[0]} exited {r.returncode}: {r.stderr.strip()[-1500:]}")
        return r.stdout

    def start(self):
        self._run("fetch")
        BROKERS.append(self)  # stopped by cleanup() whatever fails from here on
        self._run("start", self.dir)
        self.bootstrap = open(os.path.join(self.dir, "bootstrap")).read().strip()
        self.pid = int(open(os.path.join(self.dir, "pid")).read().strip())
        m = re.search(r"Kafka version: (\S+)", open(os.path.join(self.dir, "broker.log"), errors="replace").read())
        self.version = m.group(1) if m else "unknown"

    def create_topic(self, name, partitions):
        self._run("create-topic", self.dir, name, str(partitions), timeout=120)

    def cpu(self):
        return proc_cpu(self.pid)

    def stop(self):
        if self in BROKERS:
            BROKERS.remove(self)
            subprocess.run([self.sh, "stop", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120)


class Logdex:
    """logdex serve (RocksDB) fed by logdex ship through Kafka: a real broker when one is given,
    else serve's embedded mock cluster. `compaction`: the compactor on with a 30 s settle, else off (chunks stay
    as ingest stored them; on by default since 2026-12-07, with a 10 min settle)."""

    def __init__(self, binary, work, lines, partitions, compaction=False, broker=None, topic="logdex.chunks"):
        self.bin, self.work, self.lines, self.partitions = binary, work, lines, partitions
        self.compaction, self.broker, self.topic = compaction, broker, topic
        self.count_broker = True
        self.name = "logdex, compaction on" if compaction else "logdex, compaction off"
        self.store = os.path.join(work, "store")
        self.kafka_note = (f"Apache Kafka {broker.version} (one KRaft node on this machine, topic {topic} with "
                           f"{partitions} partitions; its CPU is counted in logdex's)" if broker else
                           f"serve --embedded-kafka (librdkafka's in-process mock cluster, {partitions} partitions: "
                           "it keeps only ~5 MiB per partition, more partitions keep a lagging consumer from "
                           "losing data)")
        self.notes = [
            self.kafka_note,
            ("RocksDB, store.durability async (default), store.flush_after 30s (default 10m: a quiet store's "
             "memtables are flushed once its WAL has not shrunk that long; shortened as the compaction settle is, so "
             "that the run does not wait 10 minutes for its settled store)"),
            ("compaction.enabled true, compaction.settle 30s (default 10m), compaction.interval 5s (default 1m), "
             "compaction.lookback 2d (default 1d, the replay spans 24 h); other compaction settings default: "
             "merged chunks zstd-3 with token filters" if compaction else
             "compaction.enabled false (the default is true), so chunks stay as ingest stored them and have no token "
             "filter; every other setting default"),
            "ship --format json --stream-from-line (each line's app/host pick its stream)",
            "queries: /api/v1/query with app/host/severity, `word` for the needle and the word, `regex`; "
            "without app or host `scan=true` (every stream's severity index, newest first, token filters read; a "
            "main-table scan once 1,000 chunks were read with none ruled out); counts: /api/v1/volume?exact=true",
        ]

    @staticmethod
    def env():
        # serve refuses LOGDEX_* variables it does not know (a typo must not disable auth); run.sh's
        # LOGDEX_BIN is one of them.
        return {k: v for k, v in os.environ.items() if k != "LOGDEX_BIN"}

    def _config(self):
        path = os.path.join(self.work, "logdex.yaml")
        with open(path, "w") as f:
            f.write("store:\n  ttl: 7d\n  flush_after: 30s\nkafka:\n  log_level: \"3\"\n")
            if self.broker:
                f.write(f"consumer:\n  group_id: peers.{self.topic}\n  topics: [{self.topic}]\n")
            if self.compaction:
                f.write("compaction:\n  enabled: true\n  settle: 30s\n  interval: 5s\n  lookback: 2d\n")
            else:
                f.write("compaction:\n  enabled: false\n")
        return path

    def start(self, ready=True):
        if self.broker and not getattr(self, "_topics", False):
            self.broker.create_topic(self.topic, self.partitions)
            self.broker.create_topic(self.topic + ".dlq", 1)
            self._topics = True
        self.port = free_port()
        cmd = [self.bin, "serve", "--config", self._config(), "--store-dir", self.store, "--http",
               f"127.0.0.1:{self.port}"]
        if self.broker:
            cmd += ["--brokers", self.broker.bootstrap]
            self.brokers = self.broker.bootstrap
        else:
            self.boot = os.path.join(self.work, "bootstrap")
            if os.path.exists(self.boot):
                os.remove(self.boot)
            cmd += ["--embedded-kafka", "--embedded-partitions", str(self.partitions), "--bootstrap-file", self.boot]
        self.srv = Server("logdex serve", cmd, os.path.join(self.work, "serve.log"), env=self.env())
        self.url = f"http://127.0.0.1:{self.port}"
        if not self.broker:
            wait_until("logdex serve's bootstrap file", lambda: os.path.getsize(self.boot) > 0, 120, server=self.srv)
            self.brokers = open(self.boot).read().strip()
        # Ready (partitions assigned, lag under http.ready_max_lag) before the first line is sent;
        # restarted for a cold query, it needs only to answer.
        path = "/readyz" if ready else "/healthz"
        wait_until(f"logdex serve's {path}", lambda: http(self.url + path) is not None, 120, server=self.srv)

    def restart(self):
        self.srv.stop()
        self.start(ready=False)

    def cpu(self):
        # The broker's CPU is logdex's pipeline's, unless several logdex servers share it at once.
        return self.srv.cpu() + (self.broker.cpu() if self.broker and self.count_broker else 0.0)

    def metrics(self):
        return http(self.url + "/metrics").decode()

    def metric(self, name, text=None):
        text = text if text is not None else self.metrics()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wal_bytes(self):
        for line in self.metrics().splitlines():
            if line.startswith('logdex_store_disk_bytes{kind="wal"} '):
                return float(line.rsplit(" ", 1)[1])
        raise RuntimeError("serve exports no logdex_store_disk_bytes{kind=\"wal\"}")

    def ship_cmd(self, path, follow=False):
        return [self.bin, "ship", "--brokers", self.brokers, "--topic", self.topic, "--app", "bench", "--host",
                "bench", "--format", "json", "--stream-from-line", "--no-progress", "--state-dir",
                os.path.join(self.work, "ship-state")] + (["--follow"] if follow else []) + [path]

    def counts(self):
        text = self.metrics()
        per_table = {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^logdex_store_rows_written_total\{table="([^"]+)"\} (\S+)$', text, re.M)}
        return dict(indexed_records=self.metric("logdex_indexer_records_total", text),
                    kafka_lost_messages=self.metric("logdex_consumer_lost_messages_total", text),
                    stored_chunks=self.metric("logdex_indexer_chunks_total", text),
                    store_rows_written=self.metric("logdex_store_rows_written_total", text),
                    store_rows_written_per_table=per_table,
                    compaction_cpu_s=self.metric("logdex_compaction_cpu_seconds_total", text),
                    compaction_merges=self.metric("logdex_compaction_merges_total", text),
                    compaction_records=self.metric("logdex_compaction_records_total", text),
                    compaction_parts=self.metric("logdex_compaction_parts_total", text))

    def ingest(self, path, chunks):
        cpu0, t0 = self.cpu(), time.monotonic()
        with ChildCpu() as cc:
            rc, out, err = run_client(self.ship_cmd(path), env=self.env())
        if rc != 0:
            raise RuntimeError(f"logdex ship exited {rc}: {err.decode(errors='replace')[-2000:]}")
        ship_wall = time.monotonic() - t0
        wait_until(f"{self.lines} records indexed",
                   lambda: self.metric("logdex_indexer_records_total") >= self.lines, 1800, 0.5, server=self.srv)
        wall = time.monotonic() - t0
        server_cpu = self.cpu() - cpu0
        c = self.counts()
        c.update(stored_chunks_per_million_lines=c["stored_chunks"] / self.lines * 1e6, wall_s=wall,
                 client_wall_s=ship_wall, server_cpu_s=server_cpu, client_cpu_s=cc.seconds, client="logdex ship",
                 ship_summary=err.decode(errors="replace").strip().splitlines()[-1:],
                 note="server CPU is serve's" + (" plus the Kafka broker's" if self.broker else "") +
                      (", compaction passes during ingest included (compaction_cpu_s)" if self.compaction else ""))
        return c

    # The real-time workload: `ship --follow` on the file the driver appends to every second.
    def feed_start(self, path):
        self.cpu0 = self.cpu()
        self.ship = subprocess.Popen(self.ship_cmd(path, follow=True), stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(self.work, "ship-follow.log"), "wb"),
                                     stdin=subprocess.DEVNULL, env=self.env(), start_new_session=True)
        SHIPS.append(self.ship)

    def feed(self, data):
        pass  # ship --follow reads the file

    def feed_wait(self, lines):
        wait_until(f"{lines} records indexed", lambda: self.metric("logdex_indexer_records_total") >= lines, 600,
                   0.5, server=self.srv)

    def feed_finish(self, lines):
        """CPU over the feed (read at one moment for every system, after every feed_wait)."""
        server_cpu = self.cpu() - self.cpu0
        self.ship.send_signal(signal.SIGTERM)
        try:
            _, status, ru = os.wait4(self.ship.pid, 0)
        except ChildProcessError:
            status, ru = 0, None
        self.ship.returncode = os.waitstatus_to_exitcode(status)
        if self.ship in SHIPS:
            SHIPS.remove(self.ship)
        if self.ship.returncode != 0:
            raise RuntimeError(f"logdex ship --follow exited {self.ship.returncode} (see ship-follow.log)")
        c = self.counts()
        c.update(server_cpu_s=server_cpu, client_cpu_s=(ru.ru_utime + ru.ru_stime) if ru else 0.0,
                 client="logdex ship --follow (1 s linger, the default)")
        return c

    def _compaction_quiet(self, since_passes):
        """Two polls at least two whole passes apart (a pass updates the counters when it ends) saw the
        same merges, and the last pass left nothing, grows nothing and waits on nothing."""
        text = self.metrics()
        passes = self.metric("logdex_compaction_passes_total", text)
        if passes < max(since_passes, getattr(self, "_last_passes", since_passes)) + 2:
            return False
        self._last_passes = passes
        merges = self.metric("logdex_compaction_merges_total", text)
        quiet = (self.metric("logdex_compaction_runs_left", text) == 0 and
                 self.metric("logdex_compaction_waiting_parts", text) == 0 and
                 self.metric("logdex_compaction_growing_runs", text) == 0 and
                 getattr(self, "_last_merges", None) == merges)
        self._last_merges = merges
        return quiet

    def settle(self, settle_wait_s=35):
        cpu0, t0 = self.cpu(), time.monotonic()
        if self.compaction:
            # Chunks younger than compaction.settle (30 s) wait; then passes until one merges nothing.
            time.sleep(settle_wait_s)
            since = self.metric("logdex_compaction_passes_total")
            self._last_merges = None
            self._last_passes = since
            wait_until("compaction to go quiet", lambda: self._compaction_quiet(since), 3600, 5, server=self.srv)
            waited = ("compaction passes (every 5 s) until one merged nothing with no run left, none waiting for late "
                      "records to stop and no part waiting on a Kafka commit, then the store directory unchanged "
                      "for 10 s; a stream's newest run stays "
                      "unmerged until it spans compaction.max_span (3 h) or reaches the target size")
        else:
            waited = ("the store directory unchanged for 10 s (compaction off: RocksDB's own background flushes "
                      "and compactions)")
        # store.flush_after (30 s here) flushes the memtables once the WAL has not shrunk that long, if it
        # holds 1 MiB or more: wait for that flush, as a store left alone would have it.
        wait_until("the WAL flushed (store.flush_after)", lambda: self.wal_bytes() < (1 << 20), 600, 2,
                   server=self.srv)
        waited += "; the WAL under 1 MiB (store.flush_after: its memtables flushed)"
        b = wait_dir_stable(self.store, quiet_s=10)
        c = self.counts()
        return dict(waited_for=waited, settle_s=time.monotonic() - t0, settle_cpu_s=self.cpu() - cpu0,
                    disk_bytes=b, apparent_bytes=dir_apparent_bytes(self.store), files=dir_files(self.store),
                    compaction_merges=c["compaction_merges"], compaction_parts=c["compaction_parts"],
                    compaction_records=c["compaction_records"],
                    compaction_cpu_s=c["compaction_cpu_s"],
                    stored_main_chunks=c["store_rows_written_per_table"].get("logs", 0) - c["compaction_parts"] +
                    c["compaction_merges"],
                    stored_main_chunks_how="main-table rows ingest wrote (logdex_store_rows_written_total{table=logs}) "
                                           "- parts the compactor merged and deleted + merged chunks it wrote")

    def after_stop(self):
        return dict(disk_bytes_after_clean_shutdown=dir_bytes(self.store),
                    apparent_bytes_after_clean_shutdown=dir_apparent_bytes(self.store),
                    files_after_clean_shutdown=dir_files(self.store))

    def _params(self, q):
        p = [("from", str(q["range"][0])), ("to", str(q["range"][1]))]
        if "app" in q:
            p.append(("app", q["app"]))
        if "host" in q:
            p.append(("host", q["host"]))
        if "severity" in q:
            p.append(("severity", q["severity"]))
        if "word" in q:
            p.append(("word", q["word"]))
        if "regex" in q:
            p.append(("regex", q["regex"]))
        if "app" not in q and "host" not in q:
            p.append(("scan", "true"))
        return p

    def supports(self, q):
        return True

    def _get(self, path, params):
        return json.loads(http(self.url + path + "?" + urllib.parse.urlencode(params), timeout=300))

    def query(self, q):
        if not q["page"]:
            return self.count(q)
        a = self._get("/api/v1/query", self._params(q) + [("limit", str(workload.PAGE))])
        stats = a.get("stats", {})
        how = stats.get("plan")
        if stats.get("chunks_skipped_by_tokens"):
            how = f"{how}; token filters skipped {stats['chunks_skipped_by_tokens']} chunks"
        return [(r["ts"], r["message"]) for r in a["records"]], how

    def count(self, q):
        lo, hi = q["range"]
        a = self._get("/api/v1/volume", self._params(q) + [("exact", "true"), ("step", str(hi - lo))])
        if a.get("exact") is not True:
            raise RuntimeError(f"/api/v1/volume answered exact={a.get('exact')!r} to exact=true")
        return int(a["totals"]["total"])

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
    INSERT = "/insert/jsonline?_time_field=time&_msg_field=message&_stream_fields=app,host"

    def __init__(self, binary, work, lines):
        self.bin, self.work, self.lines = binary, work, lines
        self.data = os.path.join(work, "data")
        self.notes = ["single node, default flags but -httpListenAddr and -storageDataPath (retention 7d default)",
                      "ingest: " + self.INSERT,
                      "queries: LogsQL; app/host as stream filters, needle/common word as word filters, "
                      "count with `| stats count()`"]

    def start(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.srv = Server("victoria-logs", [self.bin, f"-httpListenAddr=127.0.0.1:{self.port}",
                                            f"-storageDataPath={self.data}"], os.path.join(self.work, "server.log"))
        wait_until("VictoriaLogs /health", lambda: http(self.url + "/health") is not None, 60, server=self.srv)

    def restart(self):
        self.srv.stop()
        self.start()

    def cpu(self):
        return self.srv.cpu()

    def feed_start(self, path):
        self.cpu0 = self.cpu()

    def feed(self, data):
        http(self.url + self.INSERT, data=data,
             headers={"Content-Type": "application/stream+json"})

    def feed_wait(self, lines):
        http(self.url + "/internal/force_flush")
        wait_until(f"{lines} lines counted", lambda: int(self._count_all()) >= lines, 600, 0.5)

    def feed_finish(self, lines):
        return dict(server_cpu_s=self.cpu() - self.cpu0, indexed_records=int(self._count_all()),
                    client="one POST a second from the driver (its thread's CPU)")

    def _count_all(self):
        return self._logsql("* | stats count() n")[0]["n"]

    def ingest(self, path, chunks):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        client = post_chunks(self.url + self.INSERT,
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
        self.sql("CREATE TABLE IF NOT EXISTS logs (time UInt64, app String, host String, severity String, message String) "
                 "ENGINE = MergeTree() PARTITION BY toDate(intDiv(time, 1000)) ORDER BY (app, host, time)")

    def restart(self):
        self.srv.stop()
        self.start()

    def cpu(self):
        return self.srv.cpu()

    def insert_url(self):
        return self.url + "?" + urllib.parse.urlencode({"query": "INSERT INTO logs FORMAT JSONEachRow"})

    def sql(self, q, timeout=600):
        return http(self.url, data=q.encode(), timeout=timeout)

    def feed_start(self, path):
        self.cpu0 = self.cpu()

    def feed(self, data):
        http(self.insert_url(), data=data)

    def feed_wait(self, lines):
        wait_until(f"{lines} rows counted", lambda: int(self.sql("SELECT count() FROM logs")) >= lines, 600, 0.5)

    def feed_finish(self, lines):
        return dict(server_cpu_s=self.cpu() - self.cpu0, indexed_records=int(self.sql("SELECT count() FROM logs")),
                    client="one INSERT a second from the driver (its thread's CPU; ClickHouse's advice is at most "
                           "one insert a second)")

    def ingest(self, path, chunks):
        cpu0, t0 = self.srv.cpu(), time.monotonic()
        client = post_chunks(self.insert_url(),
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


def drop_caches():
    """Drops the kernel's page cache (root only); returns whether it could."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run_query(sysobj, q):
    t0 = time.monotonic()
    res = sysobj.query(q)
    return time.monotonic() - t0, res


def bench_queries(sysobj, manifest, runs, cold_runs):
    """Warm runs of every query (one untimed first), then `cold_runs` cold runs of each: the
    server restarted and the page cache dropped before each."""
    qres = {}
    for q in manifest["queries"]:
        entry = dict(title=q["title"], expected_count=q["expected_count"])
        qres[q["id"]] = entry
        if not sysobj.supports(q):
            entry["unsupported"] = sysobj.unsupported_reason(q)
            continue
        try:
            times = []
            res = None
            for i in range(runs + 1):  # run 0: untimed warm-up
                dt, res = run_query(sysobj, q)
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
        log(f"{sysobj.name}: {q['id']}: " + json.dumps({k: v for k, v in entry.items() if k in (
            'p50_ms', 'count', 'count_matches_expected', 'page_matches_expected', 'error', 'unsupported')}))
    for _ in range(cold_runs):
        for q in manifest["queries"]:
            entry = qres[q["id"]]
            if "unsupported" in entry or "error" in entry:
                continue
            try:
                dropped = drop_caches()  # what the stopping server wrote, too
                sysobj.restart()
                entry["cold_page_cache_dropped"] = drop_caches() and dropped
                dt, res = run_query(sysobj, q)
                entry.setdefault("cold_ms", []).append(round(dt * 1000, 2))
                if q["page"]:
                    entry["cold_page_matches_expected"] = page_key(res[0]) == page_key(q["expected_page"])
                else:
                    entry["cold_count_matches_expected"] = res == q["expected_count"]
            except Exception as e:  # noqa: BLE001 - reported, never hidden
                entry["cold_error"] = f"{type(e).__name__}: {e}"
            log(f"{sysobj.name}: {q['id']}: cold " + json.dumps({k: v for k, v in entry.items() if k.startswith("cold")}))
    return qres


def bench_system(sysobj, path, chunks, manifest, runs, raw_bytes, cold_runs=1):
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
        r["queries"] = bench_queries(sysobj, manifest, runs, cold_runs)
    finally:
        sysobj.stop()
    if hasattr(sysobj, "after_stop") and "settle" in r:
        r["settle"].update(sysobj.after_stop())
    return r


class Poster(threading.Thread):
    """Hands each second's batch to one system in its own thread; its CPU is that system's client's."""

    def __init__(self, sysobj):
        super().__init__(daemon=True)
        self.sysobj, self.batches, self.cpu, self.error, self.late = sysobj, [], 0.0, None, 0
        self.cv = threading.Condition()
        self.done = False

    def put(self, data):
        with self.cv:
            self.batches.append(data)
            self.cv.notify()

    def finish(self):
        with self.cv:
            self.done = True
            self.cv.notify()
        self.join()

    def run(self):
        while True:
            with self.cv:
                while not self.batches and not self.done:
                    self.cv.wait()
                if not self.batches:
                    return
                data = self.batches.pop(0)
                self.late = max(self.late, len(self.batches))
            t0 = time.thread_time()
            try:
                if self.error is None:
                    self.sysobj.feed(data)
            except Exception as e:  # noqa: BLE001 - reported, never hidden
                self.error = f"{type(e).__name__}: {e}"
            self.cpu += time.thread_time() - t0


def bench_realtime(systems, work, a):
    """The real-time workload: every system started, then fed at once, a batch a second; the CPU
    of every system read at one moment once all have ingested every line; each settled (all
    still running); all stopped; then each started alone again and queried."""
    out = {}
    started = []
    feed_path = os.path.join(work, "realtime.jsonl")
    open(feed_path, "wb").close()
    sharing = [s for _, s in systems if isinstance(s, Logdex) and s.broker]
    if len(sharing) > 1:
        for s in sharing:
            s.count_broker = False
    for key, s in systems:
        try:
            s.start()
            s.feed_start(feed_path)
            started.append((key, s))
        except Exception as e:  # noqa: BLE001 - a system that fails is reported, and the others still run
            log(f"realtime: {key}: failed to start: {type(e).__name__}: {e}")
            out[key] = dict(name=s.name, error=f"{type(e).__name__}: {e}")
            try:
                s.stop()
            except Exception:  # noqa: BLE001 - it may not have started at all
                pass
    # The clock starts once every system is up: no batch is late because a server was slow to start.
    start_wall_ms = int(time.time() * 1000) + 2000
    gen = workload.Realtime(a.realtime_streams, a.realtime_seconds, a.realtime_time_scale, a.seed, a.data,
                            start_wall_ms)
    broker_cpu0 = sharing[0].broker.cpu() if sharing else 0.0
    posters = {key: Poster(s) for key, s in started}
    for p in posters.values():
        p.start()
    log(f"realtime: {a.realtime_streams} streams x 1 line/s for {a.realtime_seconds} s, simulated time x"
        f"{a.realtime_time_scale}")
    late_ms = 0.0
    with open(feed_path, "ab") as f:
        for sec in range(a.realtime_seconds):
            target = start_wall_ms + sec * 1000
            while time.time() * 1000 < target:
                time.sleep(0.005)
            late_ms = max(late_ms, time.time() * 1000 - target)
            data = gen.batch(sec)
            f.write(data)
            f.flush()
            for p in posters.values():
                p.put(data)
    for p in posters.values():
        p.finish()
    manifest = gen.manifest()
    lines = manifest["lines"]
    log(f"realtime: fed {lines} lines ({gen.raw_bytes} bytes); the latest batch left {late_ms:.0f} ms after its second")
    ingested = []
    for key, s in started:
        try:
            if posters[key].error:
                raise RuntimeError(f"feeding failed: {posters[key].error}")
            s.feed_wait(lines)
            ingested.append((key, s))
        except Exception as e:  # noqa: BLE001
            log(f"realtime: {key}: failed: {type(e).__name__}: {e}")
            out[key] = dict(name=s.name, error=f"{type(e).__name__}: {e}")
    broker_cpu = sharing[0].broker.cpu() - broker_cpu0 if sharing else None
    for key, s in ingested:
        try:
            ing = s.feed_finish(lines)
            ing.setdefault("client_cpu_s", posters[key].cpu)
            ing["driver_batches_behind_max"] = posters[key].late
            if isinstance(s, Logdex) and s.broker and not s.count_broker:
                ing["shared_broker_cpu_s"] = broker_cpu
                ing["note"] = ("server CPU is serve's alone: the Kafka broker served every logdex column at once; "
                               "shared_broker_cpu_s is its CPU over the feed, for all of them together")
            cpu = ing["server_cpu_s"] + ing["client_cpu_s"]
            ing.update(cpu_s=cpu, cpu_s_per_million_lines=cpu / lines * 1e6,
                       lines_per_cpu_second=lines / cpu if cpu else None)
            out[key] = dict(name=s.name, notes=s.notes, ingest=ing)
        except Exception as e:  # noqa: BLE001
            log(f"realtime: {key}: failed: {type(e).__name__}: {e}")
            out[key] = dict(name=s.name, error=f"{type(e).__name__}: {e}")
    for key, s in started:
        r = out[key]
        try:
            if "ingest" in r:
                st = s.settle()
                st["disk_bytes_per_raw_byte"] = st["disk_bytes"] / gen.raw_bytes
                r["settle"] = st
                log(f"realtime: {s.name}: settled, {st['disk_bytes']} bytes on disk")
        except Exception as e:  # noqa: BLE001
            log(f"realtime: {key}: failed: {type(e).__name__}: {e}")
            r["error"] = f"{type(e).__name__}: {e}"
    for key, s in started:
        s.stop()
        if hasattr(s, "after_stop") and "settle" in out[key]:
            out[key]["settle"].update(s.after_stop())
    # Queried one at a time, the others stopped.
    for key, s in started:
        r = out[key]
        if "settle" not in r or "error" in r:
            continue
        try:
            s.restart()
            r["queries"] = bench_queries(s, manifest, a.runs, a.cold_runs)
        except Exception as e:  # noqa: BLE001
            log(f"realtime: {key}: failed: {type(e).__name__}: {e}")
            r["error"] = f"{type(e).__name__}: {e}"
        finally:
            s.stop()
    return dict(workload=dict(streams=a.realtime_streams, seconds=a.realtime_seconds,
                              time_scale=a.realtime_time_scale, lines=lines, raw_bytes=gen.raw_bytes,
                              start=iso_ms(gen.start_ms), end=iso_ms(gen.end_ms), latest_batch_ms=round(late_ms),
                              how=("every system fed at once: each wall-clock second, one line per stream, "
                                   "appended to a file that logdex ship --follow reads and POSTed to each peer "
                                   f"by its own driver thread; timestamps in simulated time x{a.realtime_time_scale}; "
                                   "CPU read for every system at one moment once all had every line; settled "
                                   "together; then queried one system at a time, the others stopped")),
                queries={q["id"]: dict(title=q["title"], expected_count=q["expected_count"]) for q in manifest["queries"]},
                raw=dict(raw_bytes=gen.raw_bytes), systems=out)


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
    """One markdown table of a workload's result (the replay's or the real-time one's)."""
    systems = {k: v for k, v in result["systems"].items() if "not asked" not in v.get("skipped", "")}
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
        except (KeyError, TypeError, ZeroDivisionError):
            return "-"

    def add(label, f, rawv=""):
        rows.append(f"| {label} | " + " | ".join(cell(s, f) for s in systems.values()) + f" | {rawv} |")

    def shared(s):
        b = s["ingest"].get("shared_broker_cpu_s")
        return f"; Kafka broker {fmt(b / lines * 1e6)}, shared by the logdex columns" if b is not None else ""

    add("ingest CPU-s per 10^6 lines (server + client)",
        lambda s: f"{fmt(s['ingest']['cpu_s_per_million_lines'])} ({fmt(s['ingest']['server_cpu_s'] / lines * 1e6)} + "
                  f"{fmt(s['ingest']['client_cpu_s'] / lines * 1e6)}{shared(s)})")
    add("lines/s per core (lines per CPU-s)", lambda s: fmt(s["ingest"]["lines_per_cpu_second"]))
    if "wall_s" in next((s["ingest"] for s in systems.values() if "ingest" in s), {}):
        add("ingest wall s (until all queryable)", lambda s: fmt(s["ingest"]["wall_s"]))
    add("settle: CPU-s", lambda s: fmt(s["settle"]["settle_cpu_s"]))
    zs = raw.get("zstd", {}).get("bytes")
    sn = raw.get("snappy", {}).get("bytes")
    rawtxt = ", ".join(x for x in [f"snappy {sn / raw['raw_bytes']:.3f}" if sn else "",
                                   f"zstd-3 {zs / raw['raw_bytes']:.3f}" if zs else ""] if x)
    add("bytes on disk per raw byte (settled)", lambda s: f"{s['settle']['disk_bytes_per_raw_byte']:.3f}", rawtxt)
    add("bytes on disk per raw byte after a clean shutdown (RocksDB keeps its WAL until the next start)",
        lambda s: f"{s['settle']['disk_bytes_after_clean_shutdown'] / raw['raw_bytes']:.3f}"
        if "disk_bytes_after_clean_shutdown" in s["settle"] else "-")
    add("files / parts on disk (settled)", lambda s: fmt(s["settle"].get("files", s["settle"].get("active_parts"))))
    add("stored chunks (main rows) per 10^6 lines, settled",
        lambda s: fmt(float(round(s["settle"]["stored_main_chunks"] / lines * 1e6))) if "stored_main_chunks" in s["settle"] else "-")
    if any("compaction_records" in s.get("settle", {}) and s["settle"]["compaction_merges"] for s in systems.values()):
        add("logdex compaction: CPU-s per 10^6 lines · records rewritten per line",
            lambda s: (f"{fmt(s['settle']['compaction_cpu_s'] / lines * 1e6)} · "
                       f"{s['settle']['compaction_records'] / lines:.2f}") if s["settle"].get("compaction_merges") else "-")
    g = raw.get("grep_c_needle", {})
    for qid, q in result["queries"].items():
        rawv = f"grep -c {g['seconds_median_of_3'] * 1000:.0f} ms" if qid == "needle_all_24h" and g else ""

        def f(s, qid=qid):
            e = s["queries"][qid]
            if "unsupported" in e:
                return "unsupported"
            if "error" in e:
                return "error"
            ok = (e.get("count_matches_expected") and e.get("page_matches_expected", True) and
                  e.get("cold_page_matches_expected", True) and e.get("cold_count_matches_expected", True))
            kept = " (page cache kept)" if e.get("cold_page_cache_dropped") is False else ""
            cold = f" · {fmt(max(e['cold_ms']), 1)}{kept}" if e.get("cold_ms") else (" · err" if "cold_error" in e else "")
            return f"{fmt(e['p50_ms'], 1)} / {fmt(e['p95_ms'], 1)}{cold}{'' if ok else ' ≠'}"

        add(f"{q['title']}: p50 / p95 warm · cold ms (expected {q['expected_count']:,} lines)", f, rawv)
    return "\n".join(rows)


def problems(result):
    out = []
    for k, s in result["systems"].items():
        if "skipped" in s:
            out.append(f"- {k}: skipped: {s['skipped']}")
        elif "error" in s:
            out.append(f"- {s.get('name', k)}: failed: {s['error']}")
        for qid, e in s.get("queries", {}).items():
            if "unsupported" in e:
                out.append(f"- {s['name']}: {qid} unsupported: {e['unsupported']}")
            elif "error" in e:
                out.append(f"- {s['name']}: {qid} error: {e['error']}")
            if "cold_error" in e:
                out.append(f"- {s['name']}: {qid} cold run error: {e['cold_error']}")
    return out


SYSTEMS = ("logdex", "logdex-compaction", "victorialogs", "clickhouse")


def make_system(key, a, sdir, lines, broker, topic):
    if key == "logdex":
        return Logdex(a.logdex_bin, sdir, lines, a.partitions, compaction=False, broker=broker, topic=topic)
    if key == "logdex-compaction":
        return Logdex(a.logdex_bin, sdir, lines, a.partitions, compaction=True, broker=broker, topic=topic)
    if key == "victorialogs":
        return VictoriaLogs(a.victorialogs_bin, sdir, lines)
    return ClickHouse(sdir, lines)


def count_disagreements(result, queries):
    diffs = {}
    for q in queries:
        got = {k: s["queries"][q["id"]].get("count") for k, s in result["systems"].items()
               if "queries" in s and "count" in s["queries"][q["id"]]}
        if len(set(got.values()) | {q["expected_count"]}) > 1:
            diffs[q["id"]] = dict(expected=q["expected_count"], **got)
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=3_000_000, help="replay workload's lines (0: no replay)")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--runs", type=int, default=5, help="warm runs of each query")
    ap.add_argument("--cold-runs", type=int, default=1,
                    help="cold runs of each query: the server restarted and the page cache dropped before each")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--realtime-streams", type=int, default=1000, help="real-time workload's streams (0: none)")
    ap.add_argument("--realtime-seconds", type=int, default=150)
    ap.add_argument("--realtime-time-scale", type=int, default=80,
                    help="simulated seconds per wall-clock second in the real-time workload's timestamps")
    ap.add_argument("--logdex-kafka", choices=("real", "embedded"), default="real",
                    help="real: Apache Kafka (scripts/engines/kafka.sh), falling back to serve's embedded mock "
                         "cluster when it cannot start (said in the output)")
    ap.add_argument("--logdex-bin")
    ap.add_argument("--logdex-skip", default="", help="reason logdex cannot run")
    ap.add_argument("--victorialogs-bin")
    ap.add_argument("--victorialogs-skip", default="")
    ap.add_argument("--clickhouse-skip", default="")
    ap.add_argument("--partitions", type=int, default=0,
                    help="logdex's topic partitions (default: 4 on a real broker, 64 embedded)")
    ap.add_argument("--dir", help="scratch directory (default: a new temporary one, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                                   "data", "loghub"))
    ap.add_argument("--json-out", help="also write the JSON object here")
    a = ap.parse_args()
    a.logdex_compaction_skip = a.logdex_skip
    if a.realtime_streams > 0 and (a.realtime_time_scale < 2 or a.realtime_streams > (a.realtime_time_scale - 1) * 1000):
        # Each stream has its own offset within a simulated interval of (scale - 1) s: no two lines share a
        # time, so a first page has one right answer.
        ap.error("--realtime-streams must be at most (--realtime-time-scale - 1) x 1000, and the scale at least 2")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: (log(f"interrupted by signal {s}: stopping the servers, removing the "
                                             "scratch directory; no figures"), sys.exit(128 + s)))
    work = a.dir or tempfile.mkdtemp(prefix="logdex-peers-")
    os.makedirs(work, exist_ok=True)
    wanted = [k for k in a.systems.split(",") if k]
    for k in wanted:
        if k not in SYSTEMS:
            ap.error(f"--systems: unknown system {k!r} (known: {', '.join(SYSTEMS)})")
    result = dict(
        benchmark="logdex peers (issue 15)",
        started_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        machine=dict(cores=os.cpu_count(), load_avg_at_start=os.getloadavg()),
        query_runs=dict(warm_runs=a.runs, cold_runs=a.cold_runs,
                        note="warm: one untimed run first, then `runs` timed runs, p50/p95; cold: before each, the "
                             "server is restarted and the kernel's page cache dropped (/proc/sys/vm/drop_caches; "
                             "the JSON says when it could not be), then one timed run"),
    )
    broker = None
    try:
        if any(k.startswith("logdex") for k in wanted) and not a.logdex_skip and a.logdex_kafka == "real":
            try:
                broker = KafkaBroker(work)
                broker.start()
                log(f"Apache Kafka {broker.version} at {broker.bootstrap}")
                result["logdex_kafka"] = f"Apache Kafka {broker.version}, one KRaft node on this machine"
            except Exception as e:  # noqa: BLE001 - said in the output, and logdex still runs
                log(f"the real Kafka broker could not start ({e}); logdex uses serve's embedded mock cluster")
                result["logdex_kafka"] = f"embedded mock cluster: the real broker could not start: {e}"
                broker = None
        elif not any(k.startswith("logdex") for k in wanted) or a.logdex_skip:
            result["logdex_kafka"] = "none (logdex not run)"
        else:
            result["logdex_kafka"] = "embedded mock cluster (--logdex-kafka embedded)"
        if not a.partitions:
            a.partitions = 4 if broker else 64

        def systems_for(workload_name, lines):
            out, skipped = [], {}
            for key in SYSTEMS:
                if key not in wanted:
                    skipped[key] = dict(name=key, skipped="not asked for (--systems)")
                    continue
                skip = getattr(a, f"{key.replace('-', '_')}_skip")
                if skip:
                    skipped[key] = dict(name=key, skipped=skip)
                    continue
                sdir = os.path.join(work, workload_name, key)
                os.makedirs(sdir)
                out.append((key, make_system(key, a, sdir, lines, broker, f"{workload_name}.{key}")))
            return out, skipped

        if a.lines > 0:
            end_ms = int(time.time() // 60 * 60 * 1000)
            path = os.path.join(work, "workload.jsonl")
            log(f"replay: generating {a.lines} lines (seed {a.seed}) into {path}")
            t0 = time.monotonic()
            manifest = workload.generate(path, a.lines, a.seed, end_ms, a.data)
            log(f"generated in {time.monotonic() - t0:.1f} s")
            chunkdir = os.path.join(work, "chunks")
            os.makedirs(chunkdir)
            chunks = split_file(path, 16 << 20, chunkdir)
            raw = raw_limits(path, manifest["needle"])
            rep = dict(workload=dict(lines=a.lines, seed=a.seed, raw_bytes=raw["raw_bytes"],
                                     start=iso_ms(manifest["start_ms"]), end=iso_ms(manifest["end_ms"]),
                                     apps=manifest["apps"], needle=manifest["needle"],
                                     needles_planted=manifest["needles_planted"], common_word=manifest["common_word"],
                                     common_word_substring_only_lines=manifest["common_word_substring_only_lines"],
                                     regex=manifest["regex"], page=manifest["page"]),
                       raw=raw,
                       queries={q["id"]: dict(title=q["title"], expected_count=q["expected_count"])
                                for q in manifest["queries"]})
            systems, rep["systems"] = systems_for("replay", a.lines)
            for key, s in systems:
                try:
                    rep["systems"][key] = bench_system(s, path, chunks, manifest, a.runs, raw["raw_bytes"],
                                                       a.cold_runs)
                except Exception as e:  # noqa: BLE001 - a system that fails is reported, and the others still run
                    log(f"{key}: failed: {type(e).__name__}: {e}")
                    rep["systems"][key] = dict(name=s.name, error=f"{type(e).__name__}: {e}")
                cleanup()
            rep["count_disagreements"] = count_disagreements(rep, manifest["queries"])
            result["replay"] = rep
            os.remove(path)
            shutil.rmtree(chunkdir)
        if a.realtime_streams > 0 and a.realtime_seconds > 0:
            systems, skipped = systems_for("realtime", 0)
            try:
                rt = bench_realtime(systems, work, a)
            except Exception as e:  # noqa: BLE001 - the replay's figures are kept
                log(f"realtime: failed: {type(e).__name__}: {e}")
                rt = dict(error=f"{type(e).__name__}: {e}", systems={})
            rt["systems"] = {**rt["systems"], **skipped}
            if "queries" in rt:
                rt["count_disagreements"] = count_disagreements(rt, [dict(id=k, **v) for k, v in rt["queries"].items()])
            result["realtime"] = rt
            cleanup()
        result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(json.dumps(result, indent=1))
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump(result, f, indent=1)
        for name in ("replay", "realtime"):
            if name not in result:
                continue
            r = result[name]
            if "error" in r:
                print(f"\n{name}: failed: {r['error']}")
                continue
            w = r["workload"]
            print()
            if name == "replay":
                print(f"Replay: {w['lines']:,} lines over 24 h ({w['raw_bytes'] / 1e6:.0f} MB)")
            else:
                print(f"Real time: {w['streams']:,} streams x 1 line/s for {w['seconds']} s, {w['lines']:,} lines "
                      f"({w['raw_bytes'] / 1e6:.1f} MB), timestamps in simulated time x{w['time_scale']}")
            print()
            print(table(r))
            print()
            for line in problems(r):
                print(line)
            for qid, d in r.get("count_disagreements", {}).items():
                print(f"- counts differ for {qid}: {d}")
        print()
        print(f"{result['machine']['cores']} cores, load average at start {result['machine']['load_avg_at_start']}; "
              f"logdex's Kafka: {result['logdex_kafka']}; query times p50 / p95 of {a.runs} warm runs · the "
              f"slowest of {a.cold_runs} cold run(s); ≠ marks an answer that differs from the generator's.")
    finally:
        cleanup(brokers=True)
        if not a.keep and not a.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
