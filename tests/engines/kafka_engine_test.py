#!/usr/bin/env python3
"""logdex against a real Apache Kafka broker (issue 13, label real-engine).

usage: kafka_engine_test.py LOGDEX KAFKA_SH LOGHUB_DIR SCENARIO

Each scenario starts its own broker (scripts/engines/kafka.sh) in a temporary folder and
stops it in every case; on failure it prints the broker's log tail and serve's log.
KAFKA_ENGINE_TEST_KEEP=1 keeps the temporary folder of a test that passed (one that failed
is always kept). Exit 0 passed, 1 failed, 77 skipped (Maven's repository cannot be reached
and the broker's jars are not cached: ctest's SKIP_RETURN_CODE).

Scenarios:
  ship_serve      logdex ship (a Loghub sample) -> Kafka -> logdex serve: every line once,
                  byte for byte
  kcat_json       an outside producer (kcat) sends JSON lines with logdex-format: json to a
                  line-input topic: every record found once; a line without a timestamp
                  is dead-lettered to the topic's .dlq
  broker_outage   the broker is stopped and restarted while serve consumes and ship ships:
                  lines from before, during and after are stored once; serve resumes alone
  serve_sigkill   serve SIGKILLed under load and restarted: nothing lost, nothing twice
  missing_topic   ship to a topic the broker does not have (auto-creation off): ship fails
                  and says the topic does not exist, not that Kafka is down
  cluster_failover  on a cluster of 3 nodes (replication 3, min.insync.replicas 2): ship
                  ships without a pause and serve consumes while one node, then another,
                  is SIGKILLed and started again: every line stored once; serve resumes
                  by itself
  alert_latency   ERROR lines from an outside producer (kcat, a message each) reach a
                  webhook through the real broker and serve: each alert once; the latency
                  from the broker's acknowledgement to the webhook is printed (p50, p95, max)
"""
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SKIP = 77
TOPIC = 'logdex.chunks'
# The whole test's budget, below ctest's TIMEOUT (tests/engines/CMakeLists.txt): a wait that
# would pass it fails first, so the test prints why and stops its broker, not ctest's kill.
BUDGET_S = float(os.environ.get('KAFKA_ENGINE_TEST_BUDGET', 1500))
T0 = time.monotonic()


class Failure(Exception):
    pass


def wait_for(what, cond, timeout, interval=0.2):
    """Polls cond() until it returns a true value or `timeout` seconds pass."""
    deadline = min(time.monotonic() + timeout, T0 + BUDGET_S)
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failure(f'timed out after {min(timeout, deadline - T0):.0f}s waiting for {what}'
                          + (' (the test\'s budget ran out)' if deadline == T0 + BUDGET_S else ''))
        time.sleep(interval)


def remaining(cap):
    """Seconds a subprocess may take: `cap`, or less when the budget runs out first."""
    return max(10.0, min(cap, T0 + BUDGET_S - time.monotonic()))


class Broker:
    def __init__(self, kafka_sh, dir):
        self.sh, self.dir = kafka_sh, dir

    def run(self, *args, check=True, timeout=None):
        env = dict(os.environ, KAFKA_ENGINE_OWNER_PID=str(os.getpid()))
        try:
            r = subprocess.run([self.sh, *args], env=env, capture_output=True, text=True,
                               timeout=timeout or remaining(400))
        except subprocess.TimeoutExpired:
            raise Failure(f'kafka.sh {" ".join(args)} did not finish in time')
        if check and r.returncode != 0:
            raise Failure(f'kafka.sh {" ".join(args)} exited {r.returncode}: {r.stderr.strip()[-2000:]}')
        return r

    def start(self, command='start', *args):
        t = time.monotonic()
        self.run(command, self.dir, *args)
        took = time.monotonic() - t
        self.bootstrap = open(os.path.join(self.dir, 'bootstrap')).read().strip()
        return took

    def version(self):
        m = re.search(r'Kafka version: (\S+)', open(os.path.join(self.dir, 'broker.log'), errors='replace').read())
        return m.group(1) if m else 'unknown'

    def create_topic(self, name, partitions):
        self.run('create-topic', self.dir, name, str(partitions))

    def logs(self, lines=80):
        return self.run('logs', self.dir, str(lines), check=False, timeout=30).stdout


class Serve:
    """A `logdex serve` process on the real broker, RocksDB in `store`."""

    def __init__(self, logdex, work, name, bootstrap, config):
        self.logdex, self.log_path = logdex, os.path.join(work, f'{name}.log')
        self.args = [logdex, 'serve', '--config', config, '--brokers', bootstrap, '--group', 'logdex-real',
                     '--store-dir', os.path.join(work, 'store'), '--http', '127.0.0.1:0']
        self.proc = None

    def start(self):
        log = open(self.log_path, 'a')
        log.write(f'=== serve start {datetime.datetime.utcnow().isoformat()} ===\n')
        log.flush()
        offset = log.tell()
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)

        def port():
            if self.proc.poll() is not None:
                raise Failure(f'serve exited {self.proc.returncode} at start')
            with open(self.log_path, errors='replace') as f:
                f.seek(offset)
                m = re.search(r'http: listening on [^:\s]+:(\d+)', f.read())
            return int(m.group(1)) if m else None
        self.port = wait_for('serve to listen', port, 60)

    def get(self, path):
        with urllib.request.urlopen(f'http://127.0.0.1:{self.port}{path}', timeout=60) as r:
            return r.read().decode()

    def metric(self, name):
        """Sum of every series of `name` on /metrics; None when unreachable or absent."""
        try:
            text = self.get('/metrics')
        except (OSError, http.client.HTTPException):
            return None
        values = [float(l.rsplit(' ', 1)[1]) for l in text.splitlines()
                  if l.startswith(name) and l[len(name):len(name) + 1] in (' ', '{')]
        return sum(values) if values else None

    def wait_assigned(self, partitions, timeout=120):
        t = time.monotonic()
        wait_for(f'serve to own {partitions} partitions',
                 lambda: self.alive() and self.metric('logdex_consumer_assigned_partitions') == partitions, timeout)
        print(f'serve owns {partitions} partitions {time.monotonic() - t:.1f}s after it listened')

    def alive(self):
        if self.proc.poll() is not None:
            raise Failure(f'serve exited {self.proc.returncode}')
        return True

    def lines(self, app):
        """Every stored line of `app` (multi-line records split on their newlines)."""
        to = int(time.time() * 1000) + 3_600_000
        got, cursor = [], None
        while True:
            q = f'/api/v1/query?app={app}&from=2000-01-01T00:00:00Z&to={to}&limit=5000'
            if cursor:
                q += '&cursor=' + urllib.request.quote(cursor)
            j = json.loads(self.get(q))
            for rec in j['records']:
                got.extend(rec['message'].split('\n'))
            cursor = j.get('next_cursor')
            if not cursor:
                return got

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self, chars=6000):
        try:
            return open(self.log_path, errors='replace').read()[-chars:]
        except OSError:
            return ''


def file_lines(path):
    with open(path, 'rb') as f:
        lines = f.read().split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()  # the last line end (some samples' last line has none)
    return [l.decode('utf-8', 'replace').rstrip('\r') for l in lines]


def expect_exactly(want, serve, app, timeout=180):
    """Waits until app's stored lines number len(want) and serve has no lag, then compares
    them with `want` as multisets (exactly once each, byte for byte)."""
    state = {}

    def settled():
        serve.alive()
        try:
            got = serve.lines(app)
        except (OSError, ValueError, http.client.HTTPException) as e:  # not answering yet (or a 503): ask again
            state['error'] = str(e)
            return False
        state['got'] = got
        if len(got) < len(want):
            return False
        # Nothing left to read, and everything read committed (a late duplicate would come
        # from an uncommitted replay).
        return (serve.metric('logdex_consumer_lag_messages') == 0 and
                serve.metric('logdex_consumer_unflushed_messages') == 0)
    try:
        wait_for(f'{len(want)} lines of {app}', settled, timeout, interval=0.5)
    except Failure as e:
        raise Failure(f'{e}: found {len(state.get("got", []))} (last query error: {state.get("error")})')
    got = serve.lines(app)  # once more, after the lag reached 0: late duplicates show here
    if sorted(got) != sorted(want):
        from collections import Counter
        g, w = Counter(got), Counter(want)
        missing, extra = list((w - g).elements()), list((g - w).elements())
        raise Failure(f'{app}: {len(got)} lines back for {len(want)} shipped; missing {len(missing)} '
                      f'(e.g. {missing[:2]}), extra or twice {len(extra)} (e.g. {extra[:2]})')
    print(f'{app}: {len(want)} lines shipped, {len(got)} back, byte for byte, each once')


def ship(logdex, bootstrap, app, path, extra=(), check=True):
    try:
        r = subprocess.run([logdex, 'ship', '--brokers', bootstrap, '--app', app, '--host', 'h1', '--format', 'auto',
                            '--retention', '0', '--no-progress', *extra, path], capture_output=True, text=True,
                           timeout=remaining(300))
    except subprocess.TimeoutExpired:
        raise Failure(f'ship {path} did not finish in time')
    if check and r.returncode != 0:
        raise Failure(f'ship {path} exited {r.returncode}: {r.stderr.strip()[-1500:]}')
    return r


def ship_in_background(logdex, bootstrap, app, files):
    """Ships `files` one after another from a thread: (the thread, [files shipped], [errors]);
    the caller joins the thread and raises the first error."""
    shipped, errors = [0], []

    def shipper():
        try:
            for path in files:
                ship(logdex, bootstrap, app, path)
                shipped[0] += 1
        except Exception as e:  # reported by the caller
            errors.append(e)
    th = threading.Thread(target=shipper)
    th.start()
    return th, shipped, errors


def write_config(work, extra='', sections=''):
    """serve's config: `extra` goes under consumer:, `sections` at the top level."""
    path = os.path.join(work, 'serve.yaml')
    # Loghub samples are years old: a retention and a query range that reach them.
    with open(path, 'w') as f:
        f.write('consumer:\n  session_timeout: 6s\n  shutdown_deadline: 20s\n' + extra +
                'store:\n  ttl: 36500d\nquery:\n  max_range: 36500d\nkafka:\n  log_level: "3"\n' + sections)
    return path


# ---- scenarios ----------------------------------------------------------------------------

def start_serve(ctx, consumer_extra='', partitions=4, sections=''):
    """Starts serve on the scenario's broker (ctx['serve'], stopped by main) and waits
    until it owns `partitions` partitions."""
    serve = ctx['serve'] = Serve(ctx['logdex'], ctx['work'], 'serve', ctx['broker'].bootstrap,
                                 write_config(ctx['work'], consumer_extra, sections))
    serve.start()
    serve.wait_assigned(partitions)
    return serve


def ship_serve(ctx):
    broker, logdex, work = ctx['broker'], ctx['logdex'], ctx['work']
    serve = start_serve(ctx)
    src = os.path.join(ctx['loghub'], 'HDFS_2k.log')
    t = time.monotonic()
    ship(logdex, broker.bootstrap, 'hdfs', src)
    expect_exactly(file_lines(src), serve, 'hdfs')
    print(f'ship -> query: {time.monotonic() - t:.1f}s')


def kcat_json(ctx):
    broker, logdex, work = ctx['broker'], ctx['logdex'], ctx['work']
    broker.create_topic('lines.json', 2)
    broker.create_topic('lines.json.dlq', 1)
    serve = start_serve(ctx, '  topics: [logdex.chunks, lines.json]\n', partitions=4 + 2)
    src = file_lines(os.path.join(ctx['loghub'], 'OpenSSH_2k.log'))
    base = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
    sevs = ['INFO', 'WARN', 'ERROR', 'DEBUG']

    def record(i, line):
        ts = (base + datetime.timedelta(milliseconds=i)).strftime('%Y-%m-%dT%H:%M:%S.%fZ')
        return json.dumps({'@timestamp': ts, 'app': 'kcatjson', 'host': f'h{i % 3}', 'severity': sevs[i % 4],
                           'message': f'{i} {line}'})
    # 1,500 records one per Kafka message (kcat -l), 500 as one message of 500 JSON lines.
    singles = [record(i, l) for i, l in enumerate(src[:1500])]
    batch = [record(1500 + i, l) for i, l in enumerate(src[1500:2000])]
    with open(os.path.join(work, 'singles.jsonl'), 'w') as f:
        f.write('\n'.join(singles) + '\n')
    with open(os.path.join(work, 'batch.jsonl'), 'w') as f:
        f.write('\n'.join(batch) + '\n')
    for args in (['-l', os.path.join(work, 'singles.jsonl')], [os.path.join(work, 'batch.jsonl')]):
        r = subprocess.run(['kcat', '-P', '-b', broker.bootstrap, '-t', 'lines.json', '-H', 'logdex-format=json',
                            *args], capture_output=True, text=True, timeout=remaining(120))
        if r.returncode != 0:
            raise Failure(f'kcat exited {r.returncode}: {r.stderr}')
    want = [f'{i} {l}' for i, l in enumerate(src[:2000])]
    expect_exactly(want, serve, 'kcatjson')
    dlq = serve.metric('logdex_consumer_dead_lettered_total') or 0
    if dlq:
        raise Failure(f'{dlq} messages dead-lettered')
    # A line without a timestamp dead-letters its message: serve's DLQ producer on the real
    # broker, the bytes unchanged and the reason in a header.
    bad = '{"app": "kcatjson", "message": "no time"}'
    r = subprocess.run(['kcat', '-P', '-b', broker.bootstrap, '-t', 'lines.json', '-H', 'logdex-format=json'],
                       input=bad + '\n', capture_output=True, text=True, timeout=remaining(120))
    if r.returncode != 0:
        raise Failure(f'kcat exited {r.returncode}: {r.stderr}')

    def dead_letter():
        r = subprocess.run(['kcat', '-C', '-b', broker.bootstrap, '-t', 'lines.json.dlq', '-e', '-q',
                            '-f', '%h\t%s\n'], capture_output=True, text=True, timeout=remaining(120))
        return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None
    got = wait_for('the dead letter on lines.json.dlq', dead_letter, 120, interval=0.5)
    headers, _, value = got.partition('\t')
    if value != bad or 'logdex-error=' not in headers or 'logdex-source-topic=lines.json' not in headers:
        raise Failure(f'unexpected dead letter: {got!r}')
    print(f'dead letter on lines.json.dlq: {headers[:160]}')


def numbered(src, dst, start, count):
    """HDFS lines with a unique ' #N' suffix: every line of the scenario is distinct."""
    lines = file_lines(src)
    out = [f'{lines[i % len(lines)]} #{i}' for i in range(start, start + count)]
    with open(dst, 'w') as f:
        f.write('\n'.join(out) + '\n')
    return out


def broker_outage(ctx):
    broker, logdex, work = ctx['broker'], ctx['logdex'], ctx['work']
    serve = start_serve(ctx)
    serve_pid = serve.proc.pid
    src = os.path.join(ctx['loghub'], 'HDFS_2k.log')
    want = []
    # Before: shipped and stored while the broker runs.
    want += numbered(src, f'{work}/before.log', 0, 2000)
    ship(logdex, broker.bootstrap, 'outage', f'{work}/before.log')
    expect_exactly(want, serve, 'outage')
    # During: the broker stops; ship keeps its chunks in the backlog and retries.
    t = time.monotonic()
    broker.run('stop', broker.dir)
    print(f'broker stopped in {time.monotonic() - t:.1f}s')
    want += numbered(src, f'{work}/during.log', 2000, 2000)
    during_err = open(f'{work}/ship-during.err', 'w+')
    during = subprocess.Popen([logdex, 'ship', '--brokers', broker.bootstrap, '--app', 'outage', '--host', 'h1',
                               '--format', 'auto', '--retention', '0', '--no-progress', f'{work}/during.log'],
                              stdout=during_err, stderr=subprocess.STDOUT)
    try:
        wait_for('ship to report Kafka unavailable',
                 lambda: 'Kafka is unavailable' in open(f'{work}/ship-during.err').read() or during.poll() is not None,
                 120)
        if during.poll() is not None:
            raise Failure(f'ship exited {during.returncode} while the broker was down: '
                          + open(f'{work}/ship-during.err').read()[-1500:])
        serve.alive()
        t = time.monotonic()
        took = broker.start('restart')
        print(f'broker restarted in {took:.1f}s (same ports and data)')
        try:
            rc = during.wait(timeout=remaining(300))
        except subprocess.TimeoutExpired:
            raise Failure('ship during the outage did not finish after the broker came back')
        if rc != 0:
            raise Failure(f'ship during the outage exited {rc}: ' + open(f'{work}/ship-during.err').read()[-1500:])
        err = open(f'{work}/ship-during.err').read()
        m = re.search(r'Kafka is available again; delivering a backlog of (\d+) chunks', err)
        if not m:
            raise Failure('ship did not deliver from its backlog: ' + err[-1500:])
        print(f'ship delivered its backlog of {m.group(1)} chunks {time.monotonic() - t:.1f}s after the restart began')
    finally:
        if during.poll() is None:
            during.kill()
            during.wait()
    # After: shipped once the broker is back.
    want += numbered(src, f'{work}/after.log', 4000, 2000)
    ship(logdex, broker.bootstrap, 'outage', f'{work}/after.log')
    expect_exactly(want, serve, 'outage', timeout=240)
    if serve.proc.pid != serve_pid or serve.proc.poll() is not None:
        raise Failure('serve did not survive the outage')
    print('serve resumed by itself (same process)')


def serve_sigkill(ctx):
    broker, logdex, work = ctx['broker'], ctx['logdex'], ctx['work']
    serve = start_serve(ctx)
    src = os.path.join(ctx['loghub'], 'HDFS_2k.log')
    batches, per_batch = 20, 5000
    want, files = [], []
    for b in range(batches):
        path = f'{work}/load-{b}.log'
        want += numbered(src, path, b * per_batch, per_batch)
        files.append(path)
    th, shipped, errors = ship_in_background(logdex, broker.bootstrap, 'load', files)
    try:
        # Kill while ship is still producing and serve has indexed part of it.
        wait_for('serve to index part of the load',
                 lambda: serve.alive() and (serve.metric('logdex_indexer_records_total') or 0) >= 2 * per_batch, 180,
                 interval=0.05)
        indexed = serve.metric('logdex_indexer_records_total')
        serve.proc.kill()
        serve.proc.wait()
        print(f'serve SIGKILLed after {indexed:.0f} records indexed, {shipped[0]} of {batches} files shipped')
        if shipped[0] >= batches:
            print('note: ship had finished before the kill')
        serve.start()
        serve.wait_assigned(4)
    finally:
        th.join()
    if errors:
        raise errors[0]
    expect_exactly(want, serve, 'load', timeout=300)


def missing_topic(ctx):
    broker, logdex = ctx['broker'], ctx['logdex']
    src = os.path.join(ctx['loghub'], 'HDFS_2k.log')
    t = time.monotonic()
    r = ship(logdex, broker.bootstrap, 'nosuch', src, extra=('--topic', 'no.such.topic', '--delivery-timeout-ms', '20000'),
             check=False)
    took = time.monotonic() - t
    if r.returncode == 0:
        raise Failure('ship to a missing topic exited 0')
    want = "topic 'no.such.topic' does not exist"
    if want not in r.stderr:
        raise Failure(f'ship did not say {want!r}: {r.stderr.strip()[-1500:]}')
    line = next(l for l in r.stderr.splitlines() if want in l)
    print(f'ship exited {r.returncode} after {took:.1f}s: {line.strip()[:240]}')


def cluster_failover(ctx):
    broker, logdex, work = ctx['broker'], ctx['logdex'], ctx['work']
    serve = start_serve(ctx)
    serve_pid = serve.proc.pid
    src = os.path.join(ctx['loghub'], 'HDFS_2k.log')
    want = numbered(src, f'{work}/before.log', 0, 2000)
    ship(logdex, broker.bootstrap, 'failover', f'{work}/before.log')
    expect_exactly(want, serve, 'failover')
    # Under load: files of 2,000 lines shipped one after another, from before the first kill
    # until after the second node is back, while the nodes fail in turn.
    shipped, errors, stop_load = [0], [], threading.Event()

    def load():
        try:
            while not stop_load.is_set():
                path = f'{work}/load-{shipped[0]}.log'
                lines = numbered(src, path, 2000 + shipped[0] * 2000, 2000)
                ship(logdex, broker.bootstrap, 'failover', path)
                want.extend(lines)
                shipped[0] += 1
        except Exception as e:  # reported by the main thread
            errors.append(e)
    th = threading.Thread(target=load)
    th.start()

    def more_shipped():
        n = shipped[0]
        wait_for('ship to ship another file', lambda: shipped[0] > n or not th.is_alive(), 300, interval=0.1)
        if not th.is_alive():
            raise Failure(f'the load stopped: {errors[0] if errors else "?"}')
    try:
        for node in (1, 2):
            more_shipped()
            t = time.monotonic()
            broker.run('kill-node', broker.dir, str(node))
            print(f'node {node} SIGKILLed ({shipped[0]} files shipped)')
            time.sleep(5)  # the cluster runs on two nodes meanwhile
            broker.run('start-node', broker.dir, str(node))
            print(f'node {node} started again, {time.monotonic() - t:.1f}s after its kill ({shipped[0]} files shipped)')
        more_shipped()
    finally:
        stop_load.set()
        th.join()
    if errors:
        raise errors[0]
    expect_exactly(want, serve, 'failover', timeout=300)
    if serve.proc.pid != serve_pid or serve.proc.poll() is not None:
        raise Failure('serve did not survive the node failures')
    errors = serve.metric('logdex_consumer_kafka_errors_total') or 0
    print(f'serve resumed by itself (same process; {errors:.0f} Kafka errors counted)')


class WebhookReceiver:
    """An HTTP server on loopback that records each POST: (monotonic time, headers, body)."""

    def __init__(self):
        import http.server
        receiver = self
        self.posts, self.lock = [], threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get('Content-Length', 0))).decode(errors='replace')
                with receiver.lock:
                    receiver.posts.append((time.monotonic(), dict(self.headers), body))
                self.send_response(200)
                self.send_header('Content-Length', '0')
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = f'http://127.0.0.1:{self.server.server_address[1]}/hook'
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def snapshot(self):
        with self.lock:
            return list(self.posts)


def alert_latency(ctx):
    broker = ctx['broker']
    broker.create_topic('lines.json', 1)
    broker.create_topic('lines.json.dlq', 1)
    receiver = WebhookReceiver()
    # No storm control: each line is its own alert (its words make its own template).
    sections = ('alerting:\n  limits: {per_app: 0, global: 0}\n  sinks:\n'
                f'    - {{name: hook, type: webhook, url: "{receiver.url}"}}\n')
    start_serve(ctx, '  topics: [logdex.chunks, lines.json]\n', partitions=4 + 1, sections=sections)
    # A kcat per line (one kcat reading stdin sends what it read only at EOF: no per-line
    # timing). The latency is bounded from above by timing from kcat's start (its process
    # start and connection included) and from below by timing from its exit (the message was
    # acknowledged before, but serve may have fetched it while kcat tore down).
    alerts, sent, started = 40, {}, {}

    def word(i):  # letters g..z only: no digit or hex run for the template's masks to merge
        return 'alert' + ''.join(chr(ord('g') + (i // 20 ** k) % 20) for k in range(3))
    for i in range(alerts):
        w = word(i)
        ts = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')
        line = json.dumps({'@timestamp': ts, 'app': 'alertlat', 'host': 'h1', 'severity': 'ERROR',
                           'message': f'payment {w} failed'})
        started[w] = time.monotonic()
        r = subprocess.run(['kcat', '-P', '-b', broker.bootstrap, '-t', 'lines.json', '-H', 'logdex-format=json'],
                           input=line + '\n', capture_output=True, text=True, timeout=remaining(120))
        sent[w] = time.monotonic()
        if r.returncode != 0:
            raise Failure(f'kcat exited {r.returncode}: {r.stderr}')
        time.sleep(0.2)

    def arrived():
        found = {w for w in sent if any(w in body for _, _, body in receiver.snapshot())}
        return len(found) == alerts
    wait_for(f'{alerts} alerts at the webhook', arrived, 120, interval=0.2)
    first, keys = {}, {}
    for t, headers, body in receiver.snapshot():
        for w in sent:
            if w in body:
                first.setdefault(w, t)
                keys.setdefault(w, set()).add(headers.get('Idempotency-Key'))
    twice = [w for w, k in keys.items() if len(k) != 1]
    if twice:
        raise Failure(f'{len(twice)} alerts notified under more than one key, e.g. {twice[0]}: {keys[twice[0]]}')
    def pcts(since):
        lat = sorted(1000 * (first[w] - since[w]) for w in since)
        return (f'p50 {lat[len(lat) // 2]:.0f} ms, p95 {lat[min(len(lat) - 1, int(0.95 * len(lat)))]:.0f} ms, '
                f'max {lat[-1]:.0f} ms')
    print(f'alert latency through the real broker and serve to the webhook, {alerts} alerts, one kcat each: '
          f'from kcat\'s start {pcts(started)}; from kcat\'s exit {pcts(sent)}')
    receiver.server.shutdown()


SCENARIOS = {f.__name__: f for f in (ship_serve, kcat_json, broker_outage, serve_sigkill, missing_topic,
                                     alert_latency, cluster_failover)}
# Scenarios on a cluster: its node count.
CLUSTER_NODES = {'cluster_failover': 3}


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in SCENARIOS:
        sys.exit(__doc__)
    logdex, kafka_sh, loghub, name = sys.argv[1:]
    t0 = T0
    try:
        r = subprocess.run([kafka_sh, 'fetch'], capture_output=True, text=True, timeout=remaining(900))
    except subprocess.TimeoutExpired:
        print('FAILED: kafka.sh fetch did not finish in time')
        return 1
    if r.returncode == SKIP:
        print(f'SKIPPED: {r.stderr.strip()}')
        return SKIP
    if r.returncode != 0:
        print(f'kafka.sh fetch failed ({r.returncode}): {r.stderr.strip()}')
        return 1
    work = tempfile.mkdtemp(prefix=f'logdex-kafka-{name}-')
    broker = Broker(kafka_sh, os.path.join(work, 'broker'))
    ctx = {'logdex': logdex, 'loghub': loghub, 'work': work, 'broker': broker}
    ok = False
    try:
        nodes = CLUSTER_NODES.get(name, 1)
        took = broker.start('start-cluster', str(nodes)) if nodes > 1 else broker.start()
        print(f'Apache Kafka {broker.version()} (real broker{"s" if nodes > 1 else ""}, KRaft, {nodes} '
              f'node{"s" if nodes > 1 else ""}) at {broker.bootstrap}, started in {took:.1f}s')
        broker.create_topic(TOPIC, 4)
        broker.create_topic(TOPIC + '.dlq', 1)
        t = time.monotonic()
        SCENARIOS[name](ctx)
        print(f'{name}: passed in {time.monotonic() - t:.1f}s ({time.monotonic() - t0:.1f}s with the broker)')
        ok = True
    except Failure as e:
        print(f'FAILED {name}: {e}')
    except Exception:  # a bug of the test, or serve answering something unexpected
        import traceback
        traceback.print_exc(file=sys.stdout)
        print(f'FAILED {name}: unexpected error')
    finally:
        if 'serve' in ctx:
            ctx['serve'].stop()
        if not ok:
            print('--- serve log (tail) ---')
            print(ctx['serve'].log() if 'serve' in ctx else '(not started)')
            print('--- broker log (tail) ---')
            try:
                print(broker.logs(80))
            except Failure as e:
                print(f'(no broker log: {e})')
        try:
            broker.run('stop', broker.dir, check=False, timeout=150)
        except Failure as e:  # the owner watcher SIGKILLs it when this process exits
            print(f'stopping the broker: {e}')
    if ok and os.environ.get('KAFKA_ENGINE_TEST_KEEP') != '1':
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f'kept {work}')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
