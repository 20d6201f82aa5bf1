#!/usr/bin/env bash
# Checks deploy/ (ctest: deploy.check, label deploy):
#   scripts/check-deploy.sh [LOGDEX_BINARY]     (default: build/server/logdex)
#
#  - Prometheus: promtool check config / check rules / test rules (each alert
#    fires on synthetic series); Alertmanager: amtool check-config and routes;
#  - every YAML file in deploy/ parses, and the dashboard JSON;
#  - every metric name (and label) in the alert rules, their tests and the
#    Grafana dashboard is one that logdex serve exports: the names come from the
#    source (every "logdex_..." literal outside ship/, bench/ and tests/, which
#    also finds labelled families that have no series yet) and are cross-checked
#    against /metrics of the binary, started briefly on its embedded Kafka;
#  - logdex check-config accepts the configs in deploy/ (the ConfigMap's too);
#  - the compose file, the Kubernetes manifests, the systemd unit and the
#    Dockerfile agree with each other and with those configs (ports, paths,
#    grace periods longer than consumer.shutdown_deadline, datasource uid...);
#  - the Dockerfile's build steps are README.md's (the block between
#    <!-- build-steps --> and <!-- /build-steps -->), and its runtime packages
#    provide every shared library the binary needs (dpkg);
#  - systemd-analyze verify on the unit; kubectl kustomize on deploy/k8s.
#
# Exits non-zero when any check fails. Parts whose tool is absent are skipped,
# saying so: promtool and amtool (scripts/install-deps.sh --servers installs
# them), systemd-analyze, kubectl, dpkg.
set -uo pipefail

bin=${1:-build/server/logdex}
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
cd "$(dirname "$0")/.." || exit 2

passed=0
failed=0
skipped=0
ok() { echo "ok    $*"; passed=$((passed + 1)); }
fail() { echo "FAIL  $*"; failed=$((failed + 1)); }
skip() { echo "skip  $*"; skipped=$((skipped + 1)); }
# check DESCRIPTION COMMAND...: runs COMMAND, shows its output only when it fails.
check() {
  local desc=$1 out
  shift
  if out=$("$@" 2>&1); then
    ok "$desc"
  else
    fail "$desc"
    printf '%s\n' "$out" | sed 's/^/      /'
  fi
}

# This check runs in the sanitizer build's suite too: leaks are the other
# tests' business, a report at exit must not fail check-config here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

work=$(mktemp -d /tmp/logdex-check-deploy-XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== deploy checks (binary: $bin) =="

# --- Prometheus ------------------------------------------------------------
if command -v promtool > /dev/null; then
  check "promtool check config deploy/prometheus/prometheus.yml" \
    promtool check config deploy/prometheus/prometheus.yml
  check "promtool check rules deploy/prometheus/logdex-rules.yml" \
    promtool check rules deploy/prometheus/logdex-rules.yml
  check "promtool test rules deploy/prometheus/logdex-rules.test.yml" \
    promtool test rules deploy/prometheus/logdex-rules.test.yml
else
  skip "promtool not installed (scripts/install-deps.sh --servers): Prometheus config, rules and rule tests not checked"
fi

# --- Alertmanager ----------------------------------------------------------
if command -v amtool > /dev/null; then
  am=deploy/alertmanager/alertmanager.yml
  check "amtool check-config $am" amtool check-config "$am"
  # Where alerts go: receiver, then labels.
  while read -r receiver labels; do
    # shellcheck disable=SC2086 # labels are separate words on purpose
    check "amtool routes: {$labels} -> $receiver" \
      amtool config routes test --config.file="$am" --verify.receivers="$receiver" $labels
  done << 'ROUTES'
oncall alertname=LogdexTargetDown severity=critical instance=logdex-1:8080
ops alertname=LogdexConsumerLagHigh severity=warning
log-alerts alertname=logdex_default severity=error app=checkout
oncall alertname=logdex_payments-fatal severity=fatal app=payments
ROUTES
else
  skip "amtool not installed (scripts/install-deps.sh --servers): Alertmanager config not checked"
fi

# --- systemd ---------------------------------------------------------------
unit=deploy/systemd/logdex.service
if command -v systemd-analyze > /dev/null; then
  # verify wants ExecStart's binary to exist: check a copy pointing at ours.
  mkdir -p "$work/systemd"
  sed "s|/usr/local/bin/logdex|$bin|g" "$unit" > "$work/systemd/logdex.service"
  # Unknown keys are only warnings (exit 0): any output fails the check.
  if out=$(systemd-analyze verify "$work/systemd/logdex.service" 2>&1) && [ -z "$out" ]; then
    ok "systemd-analyze verify $unit"
  else
    fail "systemd-analyze verify $unit"
    printf '%s\n' "$out" | sed 's/^/      /'
  fi
else
  skip "systemd-analyze not installed: $unit checked by its keys only"
fi

# --- Kubernetes ------------------------------------------------------------
if command -v kubectl > /dev/null; then
  if out=$(kubectl kustomize deploy/k8s 2>&1); then
    kinds=$(printf '%s\n' "$out" | sed -n 's/^kind: //p' | sort | tr '\n' ' ')
    if [ "$kinds" = "ConfigMap Deployment PodDisruptionBudget Service " ]; then
      ok "kubectl kustomize deploy/k8s renders ConfigMap, Deployment, PodDisruptionBudget, Service"
    else
      fail "kubectl kustomize deploy/k8s renders: $kinds"
    fi
  else
    fail "kubectl kustomize deploy/k8s"
    printf '%s\n' "$out" | sed 's/^/      /'
  fi
else
  skip "kubectl not installed: kustomization not rendered (manifests checked below)"
fi

# --- everything else, in Python --------------------------------------------
if ! command -v python3 > /dev/null; then
  fail "python3 not installed (scripts/install-deps.sh installs it)"
elif ! python3 -c 'import yaml' 2> /dev/null; then
  fail "python3 cannot import yaml: install python3-yaml (scripts/install-deps.sh installs it)"
else
  python3 - "$bin" "$work" > "$work/py.out" 2>&1 << 'PY'
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

import yaml

BIN, WORK = sys.argv[1], sys.argv[2]
failures = 0


def ok(msg):
    print(f"ok    {msg}")


def fail(msg, details=()):
    global failures
    failures += 1
    print(f"FAIL  {msg}")
    for d in dict.fromkeys(details):  # each problem once, in order
        print(f"      {d}")


def expect(cond, msg, details=()):
    if cond:
        ok(msg)
    else:
        fail(msg, details)
    return cond


def duration_s(text):
    """logdex/systemd/compose durations: 500ms, 10s, 2m, 1h, 7d, or plain seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


# ---------------------------------------------------------------- YAML parses
docs = {}
for path in sorted(glob.glob("deploy/**/*.yml", recursive=True) + glob.glob("deploy/**/*.yaml", recursive=True)):
    try:
        with open(path) as f:
            docs[path] = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        fail(f"YAML parses: {path}", str(e).splitlines())
expect(len(docs) >= 15, f"{len(docs)} YAML files in deploy/ parse")


def one(path):
    d = docs.get(path) or [None]
    return d[0] or {}


# ------------------------------------------------- what logdex serve exports
# Families from the source: every "logdex_..." literal in serve's modules
# (ship/ has its own registry, bench/ and tests/ export nothing). The type is
# the nearest metric builder before the literal; labels come from the
# member's .Add({{"label", ...}}) calls.
BUILDERS = {"BuildCounter": "counter", "BuildGauge": "gauge", "BuildHistogram": "histogram",
            "Counter": "counter", "Gauge": "gauge", "Seconds": "histogram"}
builder_re = re.compile(r"\b(" + "|".join(BUILDERS) + r")\s*\(")
families = {}  # name -> {"type": ..., "labels": set()}
member_of = {}  # (folder, member variable) -> family; a family's .Add() may be in another file
adds = []  # (folder, member variable, text after .Add()
sources = [p for p in glob.glob("*/**/*.cc", recursive=True) + glob.glob("*/**/*.h", recursive=True)
           if p.split("/")[0] not in ("ship", "bench", "tests") and not p.split("/")[0].startswith("build")
           and not p.endswith("_test.cc")]
for path in sources:
    text = open(path, errors="replace").read()
    if "logdex_" not in text:
        continue
    folder = os.path.dirname(path)
    # A member initialised with a family (member_(Build...().Name(...))) or a
    # local bound to one (auto& family = Build...().Name(...)).
    for m in re.finditer(r"(\w+)(?:\(|\s*=)\s*(?:prometheus::)?Build\w+\(\)\s*\.Name\(\"(logdex_\w+)\"\)", text):
        member_of[(folder, m.group(1))] = m.group(2)
    for m in re.finditer(r"\"(logdex_[a-z0-9_]+)\"", text):
        before = list(builder_re.finditer(text, max(0, m.start() - 300), m.start()))
        if not before:
            continue  # a literal that is not a metric (e.g. an alert name prefix)
        families.setdefault(m.group(1), {"type": BUILDERS[before[-1].group(1)], "labels": set()})
    for m in re.finditer(r"\b(\w+)\.Add\(\s*(\{\{.*?\}\})", text, re.S):
        adds.append((folder, m.group(1), m.group(2)))
for folder, member, text in adds:
    if member_of.get((folder, member)) in families:
        families[member_of[(folder, member)]]["labels"].update(re.findall(r"\{\s*\"([a-z_]+)\"\s*,", text))
expect(len(families) >= 30, f"{len(families)} metric families found in the source")

# Cross-check with the binary: start serve on its embedded Kafka, scrape /metrics.
scraped = {}  # family -> (type, labels seen)
proc = None
try:
    proc = subprocess.Popen([BIN, "serve", "--embedded-kafka", "--embedded-partitions", "2",
                             "--store-dir", os.path.join(WORK, "store"), "--http", "127.0.0.1:0",
                             "--log-level", "warn"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # No answer within 60 s: kill it, which ends the loop below.
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    port = None
    seen = []
    for line in proc.stdout:
        seen.append(line.rstrip())
        m = re.match(r"http: listening on [\d.]+:(\d+)", line)
        if m:
            port = m.group(1)
            break
    if port is None:
        fail(f"{BIN} serve --embedded-kafka started and served /metrics", seen[-10:])
    else:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for line in body.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                scraped[m.group(1)] = (m.group(2), set())
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s", line)
            if m and not line.startswith("#"):
                fam = re.sub(r"_(bucket|sum|count)$", "", m.group(1)) if m.group(1) not in scraped else m.group(1)
                if fam in scraped and m.group(2):
                    scraped[fam][1].update(re.findall(r"(\w+)=\"", m.group(2)))
        # The logs dashboard's LogQL, variables filled as Grafana fills them
        # (All = the variable's allValue), through the binary's Loki API.
        logs_path = "deploy/grafana/dashboards/logdex-logs.json"
        try:
            logs_dash = json.load(open(logs_path))
        except (OSError, ValueError) as e:
            logs_dash = {}
            fail(f"{logs_path} parses", [str(e)])
        fills = {"$app": ".+", "$level": ".+", "$search": "", "$__auto": "1m"}
        answered, refused = 0, []
        for p in logs_dash.get("panels", []):
            for t in p.get("targets", []):
                if (t.get("datasource") or {}).get("type") != "loki":
                    continue
                expr = t.get("expr", "")
                for k, v in fills.items():
                    expr = expr.replace(k, v)
                q = urllib.parse.urlencode({"query": expr, "step": "60000ms", "limit": "10"})
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/loki/api/v1/query_range?{q}", timeout=10).read()
                    answered += 1
                except urllib.error.HTTPError as e:
                    refused.append(f"panel '{p.get('title')}': {expr}: HTTP {e.code}: {e.read().decode()[:300]}")
        expect(answered and not refused, f"{logs_path}: the binary's Loki API answers its {answered} LogQL "
                                         "queries", refused)
except (OSError, ValueError) as e:
    fail(f"{BIN} serve --embedded-kafka started and served /metrics", [str(e)])
finally:
    if proc is not None:
        watchdog.cancel()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
if scraped:
    mism = []
    for name, (typ, labels) in sorted(scraped.items()):
        if not name.startswith("logdex_"):
            continue
        if name not in families:
            mism.append(f"{name} ({typ}) is served but the source scan did not find it")
        elif families[name]["type"] != typ:
            mism.append(f"{name}: served as {typ}, the source scan says {families[name]['type']}")
        elif not labels - {"le"} <= families[name]["labels"]:
            mism.append(f"{name}: served with labels {sorted(labels - {'le'})}, source scan found "
                        f"{sorted(families[name]['labels'])}")
    expect(not mism, f"the binary's /metrics ({sum(n.startswith('logdex_') for n in scraped)} families) "
                     "agrees with the source scan (names, types, labels)", mism)

series = {}  # series name -> family
for name, f in families.items():
    if f["type"] == "histogram":
        for suffix in ("_bucket", "_sum", "_count"):
            series[name + suffix] = name
    else:
        series[name] = name
EXTERNAL = {"up": {"type": "gauge", "labels": set()}}  # Prometheus's own per-target series
TARGET_LABELS = {"job", "instance"}
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
                "bool", "offset", "inf", "nan"}


def selectors(expr):
    """(metric names, label names) used in a PromQL expression."""
    labels = set()
    e = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)  # Grafana variables
    for body in re.findall(r"\{([^}]*)\}", e):
        body = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', body)
        labels.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", body))
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', " ", e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    for words in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        labels.update(w.strip() for w in words.split(",") if w.strip())
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?[smhdwy]*\b", " ", e)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][\w:]*", e):
        if re.match(r"\s*\(", e[m.end():]) or m.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names, labels


def check_expr(where, expr, problems):
    names, labels = selectors(expr)
    if not names:
        problems.append(f"{where}: no metric in {expr!r}")
    allowed = set(TARGET_LABELS)
    for n in names:
        fam = series.get(n)
        if fam is None and n not in EXTERNAL:
            problems.append(f"{where}: {n} is not exported by logdex serve")
            continue
        info = families[fam] if fam else EXTERNAL[n]
        allowed |= info["labels"]
        if n.endswith("_bucket") and fam:
            allowed.add("le")
    for lbl in sorted(labels - allowed):
        problems.append(f"{where}: label {lbl!r} is not on {sorted(names)}")
    for fn, n in re.findall(r"\b(rate|irate|increase)\s*\(\s*([a-zA-Z_:][\w:]*)", expr):
        fam = series.get(n)
        if fam and families[fam]["type"] == "gauge":
            problems.append(f"{where}: {fn}() of the gauge {n}")
    if "histogram_quantile" in expr and ("_bucket" not in expr or "le" not in labels):
        problems.append(f"{where}: histogram_quantile needs a _bucket series aggregated by le")
    return names


# ------------------------------------------------------------- alert rules
rules_path = "deploy/prometheus/logdex-rules.yml"
rules = [r for g in one(rules_path).get("groups", []) for r in g.get("rules", [])]
alerts = [r for r in rules if "alert" in r]
expect(len(alerts) >= 8, f"{rules_path}: {len(alerts)} alerts")
problems, used = [], set()
for r in alerts:
    name = r.get("alert")
    used |= check_expr(f"{rules_path} {name}", str(r.get("expr", "")), problems)
    if "for" not in r:
        problems.append(f"{name}: no for:")
    if (r.get("labels") or {}).get("severity") not in ("critical", "warning", "info"):
        problems.append(f"{name}: severity label must be critical, warning or info")
    ann = r.get("annotations") or {}
    if not ann.get("summary") or not ann.get("description"):
        problems.append(f"{name}: needs summary and description annotations")
names = [r.get("alert") for r in alerts]
if len(set(names)) != len(names):
    problems.append("alert names are not unique")
expect(not problems, f"{rules_path}: each alert has for:, severity, summary, description; "
                     "every metric and label is exported by logdex", problems)
required = {"up", "logdex_consumer_lag_messages", "logdex_consumer_dead_lettered_total",
            "logdex_alerting_notifications_failed_total", "logdex_alerting_circuit_open",
            "logdex_consumer_paused", "logdex_store_write_failures_total"}
expect(required <= used, f"{rules_path}: alerts on target down, lag, DLQ, sink failures, circuit, "
                         "pause and store write failures", [f"no alert uses {n}" for n in sorted(required - used)])

tests_path = "deploy/prometheus/logdex-rules.test.yml"
tdoc = one(tests_path)
expect(tdoc.get("rule_files") == ["logdex-rules.yml"], f"{tests_path} tests logdex-rules.yml")
fires, silent, problems = set(), set(), []
for t in tdoc.get("tests", []):
    for s in t.get("input_series", []):
        check_expr(f"{tests_path} '{t.get('name')}'", s.get("series", ""), problems)
    for a in t.get("alert_rule_test", []):
        (fires if a.get("exp_alerts") else silent).add(a.get("alertname"))
expect(not problems, f"{tests_path}: the synthetic series use logdex's metric and label names", problems)
expect(set(names) <= fires and set(names) <= silent,
       f"{tests_path}: every alert is tested firing and silent",
       [f"{n}: never expected to fire" for n in names if n not in fires] +
       [f"{n}: never expected silent" for n in names if n not in silent])

# --------------------------------------------------------------- Grafana
ds_path = "deploy/grafana/provisioning/datasources/prometheus.yml"
dsl = one(ds_path).get("datasources", [])
ds_uid = dsl[0].get("uid") if dsl else None
expect(ds_uid and dsl[0].get("type") == "prometheus" and dsl[0].get("url") == "http://prometheus:9090",
       f"{ds_path}: Prometheus datasource uid {ds_uid} at http://prometheus:9090")
dash_path = "deploy/grafana/dashboards/logdex.json"
try:
    dash = json.load(open(dash_path))
except (OSError, ValueError) as e:
    dash = {}
    fail(f"{dash_path} parses", [str(e)])
panels = [p for p in dash.get("panels", []) if p.get("type") != "row"]
for p in dash.get("panels", []):
    panels += [q for q in p.get("panels", []) if q.get("type") != "row"]  # collapsed rows
problems, used = [], set()
for p in panels:
    where = f"panel '{p.get('title')}'"
    if not p.get("targets"):
        problems.append(f"{where}: no queries")
    for t in p.get("targets", []):
        if not t.get("expr"):
            problems.append(f"{where}: a query without expr")
            continue
        used |= check_expr(where, t["expr"], problems)
        if (t.get("datasource") or p.get("datasource") or {}).get("uid") != ds_uid:
            problems.append(f"{where}: datasource is not uid {ds_uid}")
    if (p.get("datasource") or {}).get("uid") != ds_uid:
        problems.append(f"{where}: datasource is not uid {ds_uid}")
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") == "query":
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else str(q)
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q)
        if not m:
            problems.append(f"variable {v.get('name')}: not label_values(selector, label): {q!r}")
        else:
            check_expr(f"variable {v.get('name')}", f"{m.group(1)}{{{m.group(2)}=\"\"}}", problems)
        if (v.get("datasource") or {}).get("uid") != ds_uid:
            problems.append(f"variable {v.get('name')}: datasource is not uid {ds_uid}")
ids = [p.get("id") for p in dash.get("panels", [])]
if len(set(ids)) != len(ids):
    problems.append("panel ids are not unique")
expect(panels and not problems, f"{dash_path}: {len(panels)} panels; every query uses exported metrics "
                                f"and labels and datasource uid {ds_uid}", problems)
required = {"logdex_indexer_records_total", "logdex_consumer_messages_total", "logdex_consumer_bytes_total",
            "logdex_consumer_lag_messages", "logdex_consumer_dead_lettered_total",
            "logdex_alerting_alerts_detected_total", "logdex_alerting_notifications_sent_total",
            "logdex_alerting_notifications_failed_total", "logdex_consumer_batch_seconds_bucket",
            "logdex_store_write_seconds_bucket", "logdex_http_query_duration_seconds_bucket",
            "logdex_consumer_paused"}
expect(required <= used, f"{dash_path}: ingest, lag, DLQ, alerting, latency and pause panels",
       [f"no panel uses {n}" for n in sorted(required - used)])

# The logs dashboard: Loki panels on logdex's Loki API (uid logdex-loki, the
# LogQL itself is run against the binary above), Prometheus panels on
# exported metrics.
loki_path = "deploy/grafana/provisioning/datasources/logdex-loki.yml"
lokis = one(loki_path).get("datasources", [])
loki_uid = lokis[0].get("uid") if lokis else None
logs_path = "deploy/grafana/dashboards/logdex-logs.json"
problems = []
try:
    logs_dash = json.load(open(logs_path))
except (OSError, ValueError):
    logs_dash = {}
n_loki = 0
for p in logs_dash.get("panels", []):
    where = f"panel '{p.get('title')}'"
    kind = (p.get("datasource") or {}).get("type")
    for t in p.get("targets", []):
        if (t.get("datasource") or {}) != (p.get("datasource") or {}):
            problems.append(f"{where}: a query on another datasource than its panel's")
        if kind == "prometheus":
            check_expr(where, t.get("expr", ""), problems)
        elif kind == "loki":
            n_loki += 1
    if kind == "prometheus" and (p.get("datasource") or {}).get("uid") != ds_uid:
        problems.append(f"{where}: datasource is not uid {ds_uid}")
    elif kind == "loki" and (p.get("datasource") or {}).get("uid") != loki_uid:
        problems.append(f"{where}: datasource is not uid {loki_uid}")
    elif kind not in ("prometheus", "loki"):
        problems.append(f"{where}: datasource type {kind}")
for v in logs_dash.get("templating", {}).get("list", []):
    if v.get("type") == "query" and (v.get("datasource") or {}).get("uid") != loki_uid:
        problems.append(f"variable {v.get('name')}: datasource is not uid {loki_uid}")
if not (lokis and lokis[0].get("type") == "loki"):
    problems.append(f"{loki_path}: not a loki datasource")
expect(n_loki and not problems, f"{logs_path}: {n_loki} LogQL queries on datasource uid {loki_uid}, the others on "
                                f"exported metrics and uid {ds_uid}", problems)

# ------------------------------------------------------- logdex configs
def check_config(path, label=None):
    try:
        r = subprocess.run([BIN, "check-config", path], capture_output=True, text=True, timeout=60)
        expect(r.returncode == 0, f"logdex check-config {label or path}", (r.stdout + r.stderr).strip().splitlines())
    except (OSError, subprocess.TimeoutExpired) as e:
        fail(f"logdex check-config {label or path}", [str(e)])


example = one("deploy/logdex.example.yaml")
for path in ("deploy/logdex.example.yaml", "deploy/logdex.container.yaml", "deploy/logdex.compose.yaml"):
    check_config(path)
compose_cfg = one("deploy/logdex.compose.yaml")

# ------------------------------------------------------------- compose
cpath = "deploy/docker-compose.yml"
compose = one(cpath)
services = compose.get("services", {})
problems = []
for want in ("kafka", "hbase", "prometheus", "alertmanager", "grafana"):
    if want not in services:
        problems.append(f"no {want} service")
members = sorted(n for n, s in services.items()
                 if (s.get("build") or {}).get("dockerfile") == "deploy/Dockerfile")
if len(members) < 2:
    problems.append(f"logdex services built from deploy/Dockerfile: {members} (want 2 or more)")
for n, s in services.items():
    b = s.get("build")
    if b:
        ctx = os.path.normpath(os.path.join("deploy", b.get("context", ".")))
        if not os.path.isfile(os.path.join(ctx, b.get("dockerfile", "Dockerfile"))):
            problems.append(f"{n}: no {b.get('dockerfile', 'Dockerfile')} in build context {ctx}")
    for v in s.get("volumes", []):
        src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
        if src.startswith(".") and not os.path.exists(os.path.join("deploy", src)):
            problems.append(f"{n}: mounts {src}, which does not exist")
    deps = s.get("depends_on") or []
    for d in (deps if isinstance(deps, list) else deps.keys()):
        if d not in services:
            problems.append(f"{n}: depends on unknown service {d}")
deadline = duration_s((compose_cfg.get("consumer") or {}).get("shutdown_deadline", "10s"))
listen_port = str((compose_cfg.get("http") or {}).get("listen", "")).rsplit(":", 1)[-1]
client_ids = []
for n in members:
    s = services[n]
    if "./logdex.compose.yaml:/etc/logdex/logdex.yaml:ro" not in s.get("volumes", []):
        problems.append(f"{n}: does not mount ./logdex.compose.yaml at /etc/logdex/logdex.yaml")
    if s.get("command") != ["serve", "--config", "/etc/logdex/logdex.yaml"]:
        problems.append(f"{n}: command is not serve --config /etc/logdex/logdex.yaml")
    if duration_s(s.get("stop_grace_period", "10s")) <= deadline:
        problems.append(f"{n}: stop_grace_period is not above consumer.shutdown_deadline ({deadline:g}s)")
    if not any(str(p).endswith(":" + listen_port) for p in s.get("ports", [])):
        problems.append(f"{n}: does not publish http.listen's port {listen_port}")
    client_ids.append((s.get("environment") or {}).get("LOGDEX_KAFKA_CLIENT_ID"))
if len(set(client_ids)) != len(client_ids) or None in client_ids:
    problems.append(f"members need distinct LOGDEX_KAFKA_CLIENT_ID: {client_ids}")
store = compose_cfg.get("store") or {}
if store.get("backend") != "hbase" or (store.get("hbase") or {}).get("host") not in services:
    problems.append("logdex.compose.yaml: store.backend must be hbase with store.hbase.host a compose service")
if str((compose_cfg.get("kafka") or {}).get("bootstrap.servers", "")).split(":")[0] not in services:
    problems.append("logdex.compose.yaml: kafka bootstrap.servers is not a compose service")
prom = one("deploy/prometheus/prometheus.yml")
jobs = {j.get("job_name"): j for j in prom.get("scrape_configs", [])}
targets = sorted(t for sc in (jobs.get("logdex") or {}).get("static_configs", []) for t in sc.get("targets", []))
if targets != sorted(f"{m}:{listen_port}" for m in members):
    problems.append(f"prometheus.yml job logdex scrapes {targets}, the members are {members} on {listen_port}")
am_targets = [t for a in (prom.get("alerting") or {}).get("alertmanagers", [])
              for sc in a.get("static_configs", []) for t in sc.get("targets", [])]
if am_targets != ["alertmanager:9093"]:
    problems.append(f"prometheus.yml alertmanagers: {am_targets}")
prov = one("deploy/grafana/provisioning/dashboards/logdex.yml").get("providers", [{}])[0]
dash_mount = [v.split(":")[1] for v in (services.get("grafana") or {}).get("volumes", [])
              if isinstance(v, str) and v.startswith("./grafana/dashboards:")]
if dash_mount != [(prov.get("options") or {}).get("path")]:
    problems.append(f"grafana mounts ./grafana/dashboards at {dash_mount}, the provider reads "
                    f"{(prov.get('options') or {}).get('path')}")
loki_url = (lokis[0].get("url") if lokis else "") or ""
if loki_url not in [f"http://{m}:{listen_port}" for m in members]:
    problems.append(f"{loki_path}: url {loki_url} is not a member ({', '.join(members)}) on port {listen_port}")
expect(not problems, f"{cpath}: services, build contexts, mounts, members ({', '.join(members)}), "
                     "Prometheus targets and Grafana provisioning agree", problems)

# ---------------------------------------------------------- Kubernetes
kdir = "deploy/k8s"
kust = one(f"{kdir}/kustomization.yaml")
k8s = {}
problems = []
for res in kust.get("resources", []):
    p = os.path.join(kdir, res)
    if p not in docs:
        problems.append(f"kustomization.yaml: {res} is missing or does not parse")
        continue
    for d in docs[p]:
        k8s[d.get("kind")] = d
for kind in ("ConfigMap", "Deployment", "Service", "PodDisruptionBudget"):
    if kind not in k8s:
        problems.append(f"no {kind} in the kustomization")
cm = k8s.get("ConfigMap", {})
dep = k8s.get("Deployment", {})
pod = (dep.get("spec") or {}).get("template", {})
pod_labels = (pod.get("metadata") or {}).get("labels", {})
spec = pod.get("spec") or {}
ctrs = spec.get("containers") or [{}]
c = ctrs[0]
cfg_text = (cm.get("data") or {}).get("logdex.yaml")
cfg = {}
if cfg_text is None:
    problems.append("the ConfigMap has no logdex.yaml")
else:
    embedded = os.path.join(WORK, "configmap-logdex.yaml")
    with open(embedded, "w") as f:
        f.write(cfg_text)
    check_config(embedded, f"on the ConfigMap's logdex.yaml ({kdir}/configmap.yaml)")
    cfg = yaml.safe_load(cfg_text) or {}
if (cfg.get("store") or {}).get("backend") != "hbase":
    problems.append("the ConfigMap's store.backend is not hbase (a Deployment cannot keep RocksDB's data)")
k_deadline = duration_s((cfg.get("consumer") or {}).get("shutdown_deadline", "10s"))
k_port = int(str((cfg.get("http") or {}).get("listen", ":8080")).rsplit(":", 1)[-1])
if (dep.get("spec") or {}).get("replicas") != 3:
    problems.append("Deployment replicas is not 3")
if not spec.get("terminationGracePeriodSeconds", 30) > k_deadline:
    problems.append(f"terminationGracePeriodSeconds is not above consumer.shutdown_deadline ({k_deadline:g}s)")
ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
if ports.get("http") != k_port:
    problems.append(f"container port http is {ports.get('http')}, http.listen says {k_port}")
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
    g = (c.get(probe) or {}).get("httpGet") or {}
    if g.get("path") != path or g.get("port") not in ("http", k_port):
        problems.append(f"{probe} is not GET {path} on port {k_port}")
sc = dict(spec.get("securityContext") or {}, **(c.get("securityContext") or {}))
if not sc.get("runAsNonRoot") or sc.get("runAsUser", 0) == 0 or sc.get("allowPrivilegeEscalation", True):
    problems.append("the pod must run as non-root without privilege escalation")
if not (c.get("resources") or {}).get("requests") or not (c.get("resources") or {}).get("limits"):
    problems.append("the container has no resource requests and limits")
ann = (pod.get("metadata") or {}).get("annotations") or {}
if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != str(k_port):
    problems.append("pod annotations prometheus.io/scrape and prometheus.io/port are missing or wrong")
mounts = {m.get("name"): m.get("mountPath") for m in c.get("volumeMounts", [])}
vols = {v.get("name"): (v.get("configMap") or {}).get("name") for v in spec.get("volumes", [])}
cm_vol = [n for n, ref in vols.items() if ref == (cm.get("metadata") or {}).get("name")]
if not cm_vol or mounts.get(cm_vol[0]) != "/etc/logdex" or c.get("args") != ["serve", "--config", "/etc/logdex/logdex.yaml"]:
    problems.append("the ConfigMap is not mounted at /etc/logdex with args serve --config /etc/logdex/logdex.yaml")
sel = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels", {})
for kind, s in (("Deployment", sel), ("Service", (k8s.get("Service", {}).get("spec") or {}).get("selector", {})),
                ("PodDisruptionBudget", ((k8s.get("PodDisruptionBudget", {}).get("spec") or {}).get("selector") or {}).get("matchLabels", {}))):
    if not s or any(pod_labels.get(k) != v for k, v in s.items()):
        problems.append(f"{kind} selector {s} does not select the pods ({pod_labels})")
if (k8s.get("PodDisruptionBudget", {}).get("spec") or {}).get("maxUnavailable") != 1:
    problems.append("PodDisruptionBudget maxUnavailable is not 1")
expect(not problems, f"{kdir}: HBase config, 3 members of one group, probes, grace period, non-root, "
                     "resources, scrape annotations, selectors, PDB", problems)

# ------------------------------------------------------------- systemd
upath = "deploy/systemd/logdex.service"
unit = {}
for line in open(upath):
    line = line.strip()
    if line and not line.startswith(("#", ";", "[")) and "=" in line:
        k, v = line.split("=", 1)
        unit.setdefault(k.strip(), []).append(v.strip())
ex_deadline = duration_s((example.get("consumer") or {}).get("shutdown_deadline", "10s"))
problems = []
wants = {"Type": "simple", "User": "logdex", "Restart": "on-failure", "KillSignal": "SIGTERM",
         "ExecStart": "/usr/local/bin/logdex serve --config /etc/logdex/logdex.yaml",
         "NoNewPrivileges": "yes", "ProtectSystem": "strict"}
for k, v in wants.items():
    if unit.get(k) != [v]:
        problems.append(f"{k}={v} wanted, found {unit.get(k)}")
if "/var/lib/logdex" not in " ".join(unit.get("ReadWritePaths", [])).split():
    problems.append("ReadWritePaths does not include /var/lib/logdex")
if not unit.get("LimitNOFILE"):
    problems.append("no LimitNOFILE")
if not unit.get("TimeoutStopSec") or duration_s(unit["TimeoutStopSec"][-1]) <= ex_deadline:
    problems.append(f"TimeoutStopSec must be above consumer.shutdown_deadline ({ex_deadline:g}s)")
expect(not problems, f"{upath}: user, ExecStart, restart, SIGTERM with TimeoutStopSec above the "
                     "shutdown deadline, hardening", problems)

# ---------------------------------------------------------- Dockerfile
dpath = "deploy/Dockerfile"
lines, cur = [], ""
for raw in open(dpath):
    s = raw.rstrip("\n")
    if not cur and (not s.strip() or s.lstrip().startswith("#")):
        continue
    if cur and s.lstrip().startswith("#"):
        continue  # a comment inside a continued instruction
    cur += s[:-1] + " " if s.endswith("\\") else s
    if not s.endswith("\\"):
        lines.append(cur.strip())
        cur = ""
stages = []
for ln in lines:
    word, _, rest = ln.partition(" ")
    if word.upper() == "FROM":
        stages.append({"from": rest.split()[0], "lines": []})
    elif stages:
        stages[-1]["lines"].append((word.upper(), rest.strip()))
problems = []
if len(stages) != 2 or stages[0]["from"] != "debian:12" or stages[1]["from"] not in ("debian:12", "debian:12-slim"):
    problems.append(f"want two stages FROM debian:12 AS build, FROM debian:12-slim: {[s['from'] for s in stages]}")


def run_commands(stage):
    cmds = []
    for word, rest in stage["lines"]:
        if word != "RUN":
            continue
        rest = re.sub(r"^(--\S+\s+)+", "", rest)  # RUN --mount=... flags
        for part in re.split(r"&&|;", rest):
            part = " ".join(part.split())
            if re.match(r"(\./)?scripts/", part):
                cmds.append(part.removeprefix("./"))
    return cmds


docker_steps = run_commands(stages[0]) if stages else []
if docker_steps[:1] != ["scripts/install-deps.sh"] or not any(s.startswith("scripts/build.sh release") for s in docker_steps):
    problems.append(f"the build stage runs {docker_steps}; want scripts/install-deps.sh then scripts/build.sh release")
readme = open("README.md").read()
m = re.search(r"<!--\s*build-steps\s*-->(.*?)<!--\s*/build-steps\s*-->", readme, re.S)
if not m:
    problems.append("README.md has no <!-- build-steps --> ... <!-- /build-steps --> block")
    readme_steps = None
else:
    readme_steps = []
    for ln in m.group(1).splitlines():
        ln = ln.strip()
        if not ln or ln.startswith(("```", "#")):
            continue
        ln = re.sub(r"\s+#.*$", "", ln).removeprefix("$ ").removeprefix("./")
        readme_steps.append(" ".join(ln.split()))
    if readme_steps != docker_steps:
        problems.append(f"README.md's build steps {readme_steps} differ from the Dockerfile's {docker_steps}")
runtime = dict(stages[1]["lines"]) if len(stages) > 1 else {}
rt_lines = stages[1]["lines"] if len(stages) > 1 else []
copies = [r for w, r in rt_lines if w == "COPY"]
if not any(re.match(r"--from=build\s+/src/build/server/logdex\s+/usr/local/bin/logdex$", r) for r in copies):
    problems.append("the runtime stage does not COPY --from=build /src/build/server/logdex /usr/local/bin/logdex")
if "dir=build;" not in open("scripts/build.sh").read().replace(" ", ""):
    problems.append("scripts/build.sh release no longer builds into build/")
cfg_copy = [r.split() for r in copies if r.split()[-1:] == ["/etc/logdex/logdex.yaml"]]
if not cfg_copy or not os.path.isfile(cfg_copy[0][0]):
    problems.append("the runtime stage does not COPY a config file in the repository to /etc/logdex/logdex.yaml")
user = [r for w, r in rt_lines if w == "USER"]
if not user or user[-1].split(":")[0] in ("root", "0"):
    problems.append(f"the runtime stage's USER is {user}, want a non-root user")
if "8080" not in [r for w, r in rt_lines if w == "EXPOSE"]:
    problems.append("no EXPOSE 8080")
if runtime.get("ENTRYPOINT") != '["logdex"]' or runtime.get("CMD") != '["serve", "--config", "/etc/logdex/logdex.yaml"]':
    problems.append(f"ENTRYPOINT/CMD are {runtime.get('ENTRYPOINT')} {runtime.get('CMD')}")
if "/healthz" not in runtime.get("HEALTHCHECK", ""):
    problems.append("no HEALTHCHECK on /healthz")
ignore = os.path.exists(dpath + ".dockerignore") and [
    ln.strip() for ln in open(dpath + ".dockerignore") if ln.strip() and not ln.lstrip().startswith("#")]
if not ignore or not {"build", "build-*", ".git"} <= set(ignore):
    problems.append(f"{dpath}.dockerignore must exclude build, build-* and .git (build.sh reuses a build/ it finds)")
expect(not problems, f"{dpath}: Debian 12 stages, build steps = README's {readme_steps}, non-root, "
                     "EXPOSE 8080, ENTRYPOINT/CMD, HEALTHCHECK, build trees ignored", problems)

# Runtime packages: each library the binary needs comes from a package the
# runtime stage installs (libc6, libgcc-s1 and libstdc++6 are in the base image).
installed = set()
for w, r in rt_lines:
    if w == "RUN" and "apt-get install" in r:
        for part in re.split(r"&&|;", r):
            if "apt-get install" in part:
                installed.update(t for t in part.split()[part.split().index("install") + 1:] if not t.startswith("-"))
BASE = {"libc6", "libgcc-s1", "libstdc++6"}
if shutil.which("dpkg-query") and shutil.which("ldd") and shutil.which("readelf"):
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                        subprocess.run(["readelf", "-d", BIN], capture_output=True, text=True).stdout)
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(["ldd", BIN], capture_output=True,
                                                                    text=True).stdout, re.M))
    problems = []
    for so in needed:
        if re.match(r"lib(a|ub|l|t|hwa)san\.", so):
            continue  # sanitizer builds
        pkg = None
        if resolved.get(so):
            real = os.path.realpath(resolved[so])
            # usrmerge: dpkg may know the file under /lib rather than /usr/lib, or the other way.
            for candidate in (real, real.removeprefix("/usr"), "/usr" + real):
                r = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
                if r.returncode == 0:
                    pkg = r.stdout.split(":")[0].strip()
                    break
        if pkg is None:
            problems.append(f"{so}: no Debian package provides it here")
        elif pkg not in installed | BASE:
            problems.append(f"{so}: from {pkg}, which the runtime stage does not install")
    expect(needed and not problems, f"{dpath}: the runtime stage installs the packages of all "
                                    f"{len(needed)} libraries the binary needs", problems)
else:
    print("skip  dpkg-query, ldd or readelf missing: the runtime packages are not compared with the binary's libraries")

sys.exit(min(failures, 100))
PY
  py_rc=$?
  cat "$work/py.out"
  py_ok=$(grep -c '^ok ' "$work/py.out")
  py_fail=$(grep -c '^FAIL ' "$work/py.out")
  py_skip=$(grep -c '^skip ' "$work/py.out")
  passed=$((passed + py_ok))
  failed=$((failed + py_fail))
  skipped=$((skipped + py_skip))
  if [ "$py_rc" -ne 0 ] && [ "$py_fail" -eq 0 ]; then
    fail "the Python checks exited with $py_rc"
  fi
fi

echo "check-deploy: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
