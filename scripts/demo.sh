#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job
# end to end on the embedded defaults, printing what happened:
#   logdex serve --embedded-kafka (in-process Kafka, RocksDB in a temp dir,
#   alerts to a local webhook receiver) <- logdex ship (the bundled Loghub
#   samples) -> logdex query (example queries) + the alerts received + metrics.
# (`logdex demo`, one subcommand doing all this, is planned; this script is its stand-in.)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
scripts/install-deps.sh
scripts/build.sh release >/dev/null
bin=build/server/logdex
work=$(mktemp -d /tmp/logdex-demo-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
hook=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

cleanup() { kill "${serve_pid:-}" "${hook_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

python3 scripts/webhook_receiver.py "$hook" "$work/alerts.jsonl" & hook_pid=$!
cat > "$work/demo.yaml" <<YAML
alerting:
  query_base_url: http://127.0.0.1:$port
  sinks:
    - name: local-webhook
      type: webhook
      url: http://127.0.0.1:$hook/alerts
      secret: demo-secret
YAML

echo "== logdex $($bin version | cut -d' ' -f2-) =="
echo "== serve: embedded Kafka, RocksDB in $work/store, HTTP on 127.0.0.1:$port =="
$bin serve --embedded-kafka --bootstrap-file "$work/bootstrap" --store-dir "$work/store" \
  --http "127.0.0.1:$port" --config "$work/demo.yaml" --log-level warn > "$work/serve.log" 2>&1 & serve_pid=$!
for _ in $(seq 100); do [ -s "$work/bootstrap" ] && break; sleep 0.2; done
[ -s "$work/bootstrap" ] || { echo "serve did not start; see $work/serve.log"; exit 1; }
brokers=$(cat "$work/bootstrap")

# The samples, moved to yesterday (time of day kept) so that retention keeps them.
y=$(date -u -d yesterday +%Y-%m-%d); yy=$(date -u -d yesterday +%y%m%d)
sed -E "s/^[0-9]{6} /$yy /" tests/data/loghub/HDFS_2k.log > "$work/hdfs.log"
sed -E "s/ [0-9]{4}-[0-9]{2}-[0-9]{2} / $y /" tests/data/loghub/OpenStack_2k.log > "$work/openstack.log"
ydate=$(date -u -d yesterday '+%a %b %d'); yyear=$(date -u -d yesterday +%Y)
sed -E "s/^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [0-9]{2} ([0-9:]{8}) [0-9]{4}\]/[$ydate \1 $yyear]/" \
  tests/data/loghub/Apache_2k.log > "$work/apache.log"
echo "== ship: Loghub samples (see tests/data/loghub/LICENSE) =="
$bin ship --brokers "$brokers" --app hdfs --host datanode-1 --format auto "$work/hdfs.log"
$bin ship --brokers "$brokers" --app openstack --host nova-1 --format auto "$work/openstack.log"
$bin ship --brokers "$brokers" --app apache --host web-1 --format apache "$work/apache.log"
sleep 2

q() { echo "\$ logdex query $*"; $bin query --server "http://127.0.0.1:$port" "$@" | head -n 8; echo; }
echo "== queries =="
q --app apache --severity ERROR --since 72h --limit 5
q --host datanode-1 --since 72h --limit 3
q --app openstack --contains "status: 404" --since 72h --limit 3
for app in hdfs openstack apache; do
  n=$($bin query --server "http://127.0.0.1:$port" --app $app --since 72h --limit 100000 --json |
      python3 -c 'import json,sys; print(len(json.load(sys.stdin)["records"]))')
  echo "$app: $n records indexed"
done

echo; echo "== alerts received by the local webhook =="
sleep 2
if [ -s "$work/alerts.jsonl" ]; then
  python3 - "$work/alerts.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        a = json.loads(line)
    except ValueError:
        continue
    print('-', json.dumps(a)[:200])
PY
else
  echo "(none yet)"
fi

echo; echo "== metrics (http://127.0.0.1:$port/metrics) =="
python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
  "http://127.0.0.1:$port/metrics" | grep -E '^logdex_(consumer_messages_total|indexer_records_total|indexer_chunks_total|consumer_dead_lettered_total|alerting_[a-z_]*_total)' | head -20
echo
echo "Try next: scripts/demo.sh is done; run serve yourself:"
echo "  $bin serve --embedded-kafka --bootstrap-file /tmp/b --store-dir /tmp/s --http 127.0.0.1:8080"
echo "  $bin ship --brokers \$(cat /tmp/b) --app myapp --host \$(hostname) --format auto /var/log/syslog"
echo "  $bin query --server http://127.0.0.1:8080 --app myapp --since 1h"
